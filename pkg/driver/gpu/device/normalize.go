package device

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ErrInvalid is wrapped by every normalisation error, so callers can tell bad
// input from I/O problems.
var ErrInvalid = errors.New("invalid value")

// bdfPattern accepts a PCI address with a domain of 4 to 8 hex digits, as
// sysfs ("0000:4f:00.0") and nvidia-smi ("00000000:4F:00.0") print it.
var bdfPattern = regexp.MustCompile(`^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$`)

// NormalizePCIBusID turns a PCI address into the form the standard
// resource.kubernetes.io/pciBusID attribute requires: lowercase, 4-digit
// domain ("00000000:4F:00.0" → "0000:4f:00.0").
func NormalizePCIBusID(s string) (string, error) {
	m := bdfPattern.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return "", fmt.Errorf("PCI bus ID %q: want domain:bus:device.function: %w", s, ErrInvalid)
	}
	domain, err := strconv.ParseUint(m[1], 16, 32)
	if err != nil || domain > 0xffff {
		return "", fmt.Errorf("PCI bus ID %q: domain does not fit in 16 bits: %w", s, ErrInvalid)
	}
	return strings.ToLower(fmt.Sprintf("%04x:%s:%s.%s", domain, m[2], m[3], m[4])), nil
}

// NormalizeVersion turns a dotted version with two or three numeric parts
// into semver: "9.0" → "9.0.0", "535.104.05" → "535.104.5" (semver forbids
// leading zeros, NVIDIA driver versions have them).
func NormalizeVersion(s string) (string, error) {
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) < 2 || len(parts) > 3 {
		return "", fmt.Errorf("version %q: want MAJOR.MINOR[.PATCH]: %w", s, ErrInvalid)
	}
	nums := make([]uint64, 3)
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return "", fmt.Errorf("version %q: part %q is not a number: %w", s, p, ErrInvalid)
		}
		nums[i] = n
	}
	return fmt.Sprintf("%d.%d.%d", nums[0], nums[1], nums[2]), nil
}

// architectures maps CUDA compute capability major.minor to NVIDIA's
// architecture names (as NVML reports them).
var architectures = map[string]string{
	"5.0": "Maxwell", "5.2": "Maxwell", "5.3": "Maxwell",
	"6.0": "Pascal", "6.1": "Pascal", "6.2": "Pascal",
	"7.0": "Volta", "7.2": "Volta",
	"7.5": "Turing",
	"8.0": "Ampere", "8.6": "Ampere", "8.7": "Ampere",
	"8.9":  "Ada Lovelace",
	"9.0":  "Hopper",
	"10.0": "Blackwell", "10.3": "Blackwell", "12.0": "Blackwell", "12.1": "Blackwell",
}

// ArchitectureFor returns the architecture of a normalised compute
// capability ("9.0.0" → "Hopper"), or "" when unknown.
func ArchitectureFor(computeCapability string) string {
	parts := strings.Split(computeCapability, ".")
	if len(parts) < 2 {
		return ""
	}
	return architectures[parts[0]+"."+parts[1]]
}

// BrandFor derives NVML's brand name from a product name. nvidia-smi has no
// query field for the brand, so the nvidia-smi and sysfs backends use this;
// inventories may set the brand explicitly.
func BrandFor(productName string) string {
	name := strings.TrimPrefix(strings.TrimSpace(productName), "NVIDIA ")
	switch {
	case strings.HasPrefix(name, "GeForce RTX"):
		return "GeForceRTX"
	case strings.HasPrefix(name, "GeForce"):
		return "GeForce"
	case strings.HasPrefix(name, "TITAN RTX"), strings.HasPrefix(name, "Titan RTX"):
		return "TitanRTX"
	case strings.HasPrefix(name, "TITAN"), strings.HasPrefix(name, "Titan"):
		return "Titan"
	case strings.HasPrefix(name, "Quadro RTX"):
		return "QuadroRTX"
	case strings.HasPrefix(name, "Quadro"):
		return "Quadro"
	case strings.HasPrefix(name, "Tesla"):
		return "Tesla"
	case strings.HasPrefix(name, "RTX"):
		return "NvidiaRTX"
	default:
		return "Nvidia"
	}
}

// profilePattern matches GPU instance profile names: "1g.10gb", "1g.10gb+me",
// "7g.141gb". Compute-instance sub-profiles ("1c.3g.20gb") do not match:
// they split one GPU instance into several MIG devices, which this driver
// does not model.
var profilePattern = regexp.MustCompile(`^([1-9])g\.([1-9][0-9]*)gb(\+[a-z]+|-[a-z]+)*$`)

// ParseProfile checks a MIG profile name and returns its compute slices and
// its nominal memory in GB.
func ParseProfile(profile string) (computeSlices, memoryGB int, err error) {
	m := profilePattern.FindStringSubmatch(profile)
	if m == nil {
		return 0, 0, fmt.Errorf("MIG profile %q: want <N>g.<M>gb (compute-instance profiles are not supported): %w", profile, ErrInvalid)
	}
	computeSlices, _ = strconv.Atoi(m[1])
	memoryGB, err = strconv.Atoi(m[2])
	if err != nil {
		return 0, 0, fmt.Errorf("MIG profile %q: %w", profile, ErrInvalid)
	}
	return computeSlices, memoryGB, nil
}
