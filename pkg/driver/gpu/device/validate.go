package device

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	gpuUUIDPattern  = regexp.MustCompile(`^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	migUUIDPattern  = regexp.MustCompile(`^MIG-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	pcieRootPattern = regexp.MustCompile(`^pci[0-9a-f]{4}:[0-9a-f]{2}$`)
	semverPattern   = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)
)

const (
	// maxNUMANode mirrors the kernel's MAX_NUMNODES bound that
	// deviceattribute enforces.
	maxNUMANode = 1023
	// maxMemorySlices bounds placements so that one GPU's counter set stays
	// within the API's 32 counters per set.
	maxMemorySlices = resourceapi.ResourceSliceMaxCountersPerCounterSet
	// maxMessageLength keeps health messages readable in kubelet reports.
	maxMessageLength = 256
	// maxCapMinor bounds nvidia-caps minor numbers (MINORMASK).
	maxCapMinor = 1<<20 - 1
)

// Validate checks a node's GPUs: every field in range, and names, UUIDs,
// minors and PCI addresses unique. It returns all problems at once, each
// with the path of the offending field.
func Validate(gpus []GPU) error {
	var errs field.ErrorList
	root := field.NewPath("gpus")
	indexes := map[int]bool{}
	minors := map[int]bool{}
	busIDs := map[string]bool{}
	uuids := map[string]bool{}
	caps := map[int]bool{}
	for i := range gpus {
		g := &gpus[i]
		p := root.Index(i)
		if g.Index < 0 {
			errs = append(errs, field.Invalid(p.Child("index"), g.Index, "must not be negative"))
		} else if indexes[g.Index] {
			errs = append(errs, field.Duplicate(p.Child("index"), g.Index))
		}
		indexes[g.Index] = true
		if g.Minor < 0 {
			errs = append(errs, field.Invalid(p.Child("minor"), g.Minor, "must not be negative"))
		} else if minors[g.Minor] {
			errs = append(errs, field.Duplicate(p.Child("minor"), g.Minor))
		}
		minors[g.Minor] = true
		if !gpuUUIDPattern.MatchString(g.UUID) {
			errs = append(errs, field.Invalid(p.Child("uuid"), g.UUID, "must be GPU-<uuid>"))
		} else if uuids[g.UUID] {
			errs = append(errs, field.Duplicate(p.Child("uuid"), g.UUID))
		}
		uuids[g.UUID] = true
		if normalized, err := NormalizePCIBusID(g.PCIBusID); err != nil || normalized != g.PCIBusID {
			errs = append(errs, field.Invalid(p.Child("pciBusID"), g.PCIBusID, "must be a normalised PCI address such as 0000:4f:00.0"))
		} else if busIDs[g.PCIBusID] {
			errs = append(errs, field.Duplicate(p.Child("pciBusID"), g.PCIBusID))
		}
		busIDs[g.PCIBusID] = true
		errs = append(errs, validateString(p.Child("productName"), g.ProductName, true)...)
		errs = append(errs, validateString(p.Child("brand"), g.Brand, false)...)
		errs = append(errs, validateString(p.Child("architecture"), g.Architecture, false)...)
		errs = append(errs, validateString(p.Child("nvlinkDomain"), g.NVLinkDomain, false)...)
		errs = append(errs, validateSemver(p.Child("cudaComputeCapability"), g.CUDAComputeCapability)...)
		errs = append(errs, validateSemver(p.Child("driverVersion"), g.DriverVersion)...)
		if g.MemoryBytes < 0 {
			errs = append(errs, field.Invalid(p.Child("memory"), g.MemoryBytes, "must not be negative"))
		}
		if g.PCIeRoot != "" && !pcieRootPattern.MatchString(g.PCIeRoot) {
			errs = append(errs, field.Invalid(p.Child("pcieRoot"), g.PCIeRoot, "must be pci<domain>:<bus>, e.g. pci0000:4a"))
		}
		if g.NUMANode != nil && (*g.NUMANode < 0 || *g.NUMANode > maxNUMANode) {
			errs = append(errs, field.Invalid(p.Child("numaNode"), *g.NUMANode, fmt.Sprintf("must be between 0 and %d (omit it for devices without NUMA affinity)", maxNUMANode)))
		}
		errs = append(errs, validateHealth(p.Child("health"), g.Health)...)
		errs = append(errs, validateMIG(p.Child("mig", "devices"), g, uuids, caps)...)
	}
	return errs.ToAggregate()
}

// validateMIG checks the MIG devices of g. uuids and caps hold the UUIDs and
// nvidia-caps minors of the GPUs and MIG devices checked before.
func validateMIG(p *field.Path, g *GPU, uuids map[string]bool, caps map[int]bool) field.ErrorList {
	var errs field.ErrorList
	if !g.MIGEnabled && len(g.MIG) > 0 {
		errs = append(errs, field.Forbidden(p, "MIG devices need MIG mode enabled on the GPU"))
	}
	for j := range g.MIG {
		m := &g.MIG[j]
		mp := p.Index(j)
		if !migUUIDPattern.MatchString(m.UUID) {
			errs = append(errs, field.Invalid(mp.Child("uuid"), m.UUID, "must be MIG-<uuid> (driver R470 or newer)"))
		} else if uuids[m.UUID] {
			errs = append(errs, field.Duplicate(mp.Child("uuid"), m.UUID))
		}
		uuids[m.UUID] = true
		if _, _, err := ParseProfile(m.Profile); err != nil {
			errs = append(errs, field.Invalid(mp.Child("profile"), m.Profile, err.Error()))
		}
		if m.Placement.Start < 0 || m.Placement.Size < 1 || m.Placement.Start+m.Placement.Size > maxMemorySlices {
			errs = append(errs, field.Invalid(mp.Child("placement"), fmt.Sprintf("%d:%d", m.Placement.Start, m.Placement.Size),
				fmt.Sprintf("must be start:size with size >= 1 within %d memory slices", maxMemorySlices)))
		}
		for k := range j {
			if g.MIG[k].Placement.overlaps(m.Placement) {
				errs = append(errs, field.Invalid(mp.Child("placement"), fmt.Sprintf("%d:%d", m.Placement.Start, m.Placement.Size),
					fmt.Sprintf("overlaps MIG device %s", g.MIG[k].UUID)))
			}
		}
		if m.MemoryBytes < 0 {
			errs = append(errs, field.Invalid(mp.Child("memory"), m.MemoryBytes, "must not be negative"))
		}
		if m.Caps != nil {
			// Two devices with one capability would give one claim's
			// containers another claim's MIG device.
			for _, c := range []struct {
				name  string
				minor int
			}{{"gpuInstance", m.Caps.GPUInstance}, {"computeInstance", m.Caps.ComputeInstance}} {
				cp, minor := mp.Child("caps", c.name), c.minor
				switch {
				case minor < 0 || minor > maxCapMinor:
					errs = append(errs, field.Invalid(cp, minor, fmt.Sprintf("must be between 0 and %d", maxCapMinor)))
				case caps[minor]:
					errs = append(errs, field.Duplicate(cp, minor))
				}
				caps[minor] = true
			}
		}
	}
	return errs
}

func validateString(p *field.Path, value string, required bool) field.ErrorList {
	if value == "" {
		if required {
			return field.ErrorList{field.Required(p, "")}
		}
		return nil
	}
	if len(value) > resourceapi.DeviceAttributeMaxValueLength {
		return field.ErrorList{field.TooLong(p, value, resourceapi.DeviceAttributeMaxValueLength)}
	}
	return nil
}

func validateSemver(p *field.Path, value string) field.ErrorList {
	if value != "" && !semverPattern.MatchString(value) {
		return field.ErrorList{field.Invalid(p, value, "must be MAJOR.MINOR.PATCH")}
	}
	return nil
}

func validateHealth(p *field.Path, h Health) field.ErrorList {
	var errs field.ErrorList
	switch h.Status {
	case "", Healthy:
	case Unhealthy:
		if h.Reason == "" {
			errs = append(errs, field.Required(p.Child("reason"), "an unhealthy device needs a reason"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("status"), h.Status, []HealthStatus{Healthy, Unhealthy}))
	}
	for _, msg := range validation.IsValidLabelValue(h.Reason) {
		errs = append(errs, field.Invalid(p.Child("reason"), h.Reason, msg))
	}
	if len(h.Message) > maxMessageLength {
		errs = append(errs, field.TooLong(p.Child("message"), h.Message, maxMessageLength))
	}
	return errs
}

// SortMIG orders MIG devices by placement, the order in which they are
// published.
func SortMIG(migs []MIGDevice) {
	slices.SortStableFunc(migs, func(a, b MIGDevice) int { return cmp.Compare(a.Placement.Start, b.Placement.Start) })
}
