package discovery

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/drasched/drasched/pkg/driver/gpu/device"
)

// smiGPU is one row of `nvidia-smi --query-gpu`.
type smiGPU struct {
	Index                 int
	UUID                  string
	Name                  string
	PCIBusID              string
	MemoryMiB             int64
	DriverVersion         string
	ComputeCapability     string
	MIGEnabled            bool
	UncorrectableECC      int64
	Health                device.Health
	unavailableFieldNames []string
}

// fieldState classifies one CSV value.
type fieldState int

const (
	fieldValue       fieldState = iota
	fieldUnavailable            // [N/A], [Not Supported], empty: the GPU has no such value
	fieldError                  // [GPU is lost], [Unknown Error], ...: the GPU is in trouble
)

func classify(value string) fieldState {
	switch value {
	case "", "[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Insufficient Permissions]":
		return fieldUnavailable
	}
	if strings.HasPrefix(value, "[") && strings.HasSuffix(value, "]") {
		return fieldError
	}
	return fieldValue
}

// healthReasons maps nvidia-smi's error values to taint reasons.
var healthReasons = map[string]string{
	"[GPU is lost]":        "GPULost",
	"[GPU requires reset]": "GPURequiresReset",
	"[Requires Reset]":     "GPURequiresReset",
	"[Unknown Error]":      "UnknownError",
}

// parseQuery parses `nvidia-smi --query-gpu=<queryFields>
// --format=csv,noheader,nounits`.
func parseQuery(out []byte) ([]smiGPU, error) {
	if len(bytes.TrimSpace(out)) == 0 {
		return nil, nil
	}
	if out[len(out)-1] != '\n' {
		// nvidia-smi ends every row with a newline; without one, the
		// output was cut off and the last row cannot be trusted.
		return nil, invalidf("nvidia-smi --query-gpu output is truncated (no final newline)")
	}
	r := csv.NewReader(bytes.NewReader(out))
	r.FieldsPerRecord = len(queryFields)
	r.TrimLeadingSpace = true
	r.ReuseRecord = true
	var gpus []smiGPU
	for {
		record, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, invalidf("nvidia-smi --query-gpu output: %v", err)
		}
		line, _ := r.FieldPos(0)
		gpu, err := parseQueryRecord(record)
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi --query-gpu output line %d: %w", line, err)
		}
		gpus = append(gpus, gpu)
	}
	return gpus, nil
}

func parseQueryRecord(record []string) (smiGPU, error) {
	var g smiGPU
	values := map[string]string{}
	for i, name := range queryFields {
		value := strings.TrimSpace(record[i])
		switch classify(value) {
		case fieldValue:
			values[name] = value
		case fieldUnavailable:
			g.unavailableFieldNames = append(g.unavailableFieldNames, name)
		case fieldError:
			if g.Health.IsHealthy() {
				reason := healthReasons[value]
				if reason == "" {
					reason = "QueryError"
				}
				g.Health = device.Health{
					Status:  device.Unhealthy,
					Reason:  reason,
					Message: fmt.Sprintf("nvidia-smi reports %s for %s", value, name),
				}
			}
		}
	}
	for _, required := range []string{"index", "uuid", "pci.bus_id"} {
		if _, ok := values[required]; !ok {
			return g, invalidf("no value for %s (%q)", required, record[indexOf(required)])
		}
	}
	index, err := strconv.Atoi(values["index"])
	if err != nil || index < 0 {
		return g, invalidf("index %q is not a GPU index", values["index"])
	}
	g.Index = index
	g.UUID = values["uuid"]
	if g.PCIBusID, err = device.NormalizePCIBusID(values["pci.bus_id"]); err != nil {
		return g, err
	}
	g.Name = values["name"]
	if v, ok := values["memory.total"]; ok {
		mib, err := strconv.ParseInt(v, 10, 64)
		if err != nil || mib < 0 || mib > math.MaxInt64>>20 {
			return g, invalidf("memory.total %q is not a number of MiB", v)
		}
		g.MemoryMiB = mib
	}
	if v, ok := values["driver_version"]; ok {
		if g.DriverVersion, err = device.NormalizeVersion(v); err != nil {
			return g, err
		}
	}
	if v, ok := values["compute_cap"]; ok {
		if g.ComputeCapability, err = device.NormalizeVersion(v); err != nil {
			return g, err
		}
	}
	switch v := values["mig.mode.current"]; v {
	case "Enabled":
		g.MIGEnabled = true
	case "Disabled", "":
	default:
		return g, invalidf("mig.mode.current %q is neither Enabled nor Disabled", v)
	}
	if v, ok := values["ecc.errors.uncorrected.volatile.total"]; ok {
		count, err := strconv.ParseInt(v, 10, 64)
		if err != nil || count < 0 {
			return g, invalidf("ecc.errors.uncorrected.volatile.total %q is not a count", v)
		}
		g.UncorrectableECC = count
		if count > 0 && g.Health.IsHealthy() {
			g.Health = device.Health{
				Status:  device.Unhealthy,
				Reason:  "UncorrectableECCErrors",
				Message: fmt.Sprintf("%d uncorrectable ECC errors since the driver was loaded", count),
			}
		}
	}
	return g, nil
}

func indexOf(name string) int {
	for i, n := range queryFields {
		if n == name {
			return i
		}
	}
	return -1
}

// smiMIG is one MIG device line of `nvidia-smi -L`.
type smiMIG struct {
	Profile string
	Device  int
	UUID    string
}

// smiList is `nvidia-smi -L`: GPU UUIDs and MIG devices by GPU index.
type smiList struct {
	GPUUUIDs map[int]string
	MIG      map[int][]smiMIG
}

var (
	listGPULine = regexp.MustCompile(`^GPU (\d+): (.*) \(UUID: ([^()\s]+)\)$`)
	listMIGLine = regexp.MustCompile(`^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: ([^()\s]+)\)$`)
)

// parseList parses `nvidia-smi -L`:
//
//	GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-...)
//	  MIG 1g.5gb      Device  0: (UUID: MIG-...)
func parseList(out []byte) (smiList, error) {
	list := smiList{GPUUUIDs: map[int]string{}, MIG: map[int][]smiMIG{}}
	current := -1
	err := eachLine(out, func(n int, line string) error {
		if m := listGPULine.FindStringSubmatch(line); m != nil {
			index, err := strconv.Atoi(m[1])
			if err != nil {
				return invalidf("GPU index %q", m[1])
			}
			if _, dup := list.GPUUUIDs[index]; dup {
				return invalidf("GPU %d listed twice", index)
			}
			list.GPUUUIDs[index] = m[3]
			current = index
			return nil
		}
		if m := listMIGLine.FindStringSubmatch(line); m != nil {
			if current < 0 {
				return invalidf("MIG device before any GPU")
			}
			dev, err := strconv.Atoi(m[2])
			if err != nil {
				return invalidf("MIG device index %q", m[2])
			}
			list.MIG[current] = append(list.MIG[current], smiMIG{Profile: m[1], Device: dev, UUID: m[3]})
			return nil
		}
		return invalidf("unexpected line %q", line)
	})
	if err != nil {
		return smiList{}, fmt.Errorf("nvidia-smi -L output: %w", err)
	}
	return list, nil
}

// smiGPUInstance is one row of `nvidia-smi mig -lgi`.
type smiGPUInstance struct {
	GPU        int
	Profile    string
	ProfileID  int
	InstanceID int
	Placement  device.Placement
}

var gpuInstanceRow = regexp.MustCompile(`^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|$`)

// parseGPUInstances parses `nvidia-smi mig -lgi`:
//
//	|   0  MIG 1g.5gb          19        7          0:1     |
func parseGPUInstances(out []byte) ([]smiGPUInstance, error) {
	var instances []smiGPUInstance
	err := eachTableRow(out, func(line string) error {
		m := gpuInstanceRow.FindStringSubmatch(line)
		if m == nil {
			return invalidf("unexpected GPU instance row %q", line)
		}
		nums := atoiAll(m[1], m[3], m[4], m[5], m[6])
		if nums == nil {
			return invalidf("GPU instance row %q has a number out of range", line)
		}
		instances = append(instances, smiGPUInstance{
			GPU: nums[0], Profile: m[2], ProfileID: nums[1], InstanceID: nums[2],
			Placement: device.Placement{Start: nums[3], Size: nums[4]},
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi mig -lgi output: %w", err)
	}
	return instances, nil
}

// profileKey identifies a MIG profile on one GPU.
type profileKey struct {
	GPU     int
	Profile string
}

var gpuInstanceProfileRow = regexp.MustCompile(`^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+\d+/\d+\s+([0-9]+(?:\.[0-9]+)?)\s`)

// parseGPUInstanceProfiles parses `nvidia-smi mig -lgip` into the memory, in
// MiB, of each profile on each GPU. Only the first line of each profile
// carries its name and memory; the second (CE, JPEG, OFA counts) is skipped.
//
//	|   0  MIG 1g.5gb        19     7/7        4.75       No     14     0     0   |
//	|                                                             1     0     0   |
func parseGPUInstanceProfiles(out []byte) (map[profileKey]int64, error) {
	memory := map[profileKey]int64{}
	err := eachTableRow(out, func(line string) error {
		if !strings.Contains(line, " MIG ") {
			// The second line of a profile: engine counts only.
			return nil
		}
		m := gpuInstanceProfileRow.FindStringSubmatch(line)
		if m == nil {
			return invalidf("unexpected GPU instance profile row %q", line)
		}
		gpu, err := strconv.Atoi(m[1])
		if err != nil {
			return invalidf("GPU index %q", m[1])
		}
		gib, err := strconv.ParseFloat(m[4], 64)
		if err != nil || gib <= 0 || gib > 1<<20 {
			return invalidf("memory %q GiB", m[4])
		}
		memory[profileKey{GPU: gpu, Profile: m[2]}] = int64(math.Round(gib * 1024))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi mig -lgip output: %w", err)
	}
	return memory, nil
}

// tableHeader matches the frame and header lines of nvidia-smi's mig tables.
var tableHeader = regexp.MustCompile(`^(\+[-=+]*\+|\|[=]+\||\|\s*(GPU instances:|GPU instance profiles:|GPU\s+Name\s.*|ID\s+ID\s+Start:Size|Free/Total\s.*)\s*\|)$`)

// eachTableRow calls fn for every data row of an nvidia-smi mig table,
// skipping frames and headers. Anything else is an error: a line that is
// neither is either a format this code does not know or damaged output.
func eachTableRow(out []byte, fn func(line string) error) error {
	return eachLine(out, func(n int, line string) error {
		trimmed := strings.TrimSpace(line)
		if tableHeader.MatchString(trimmed) {
			return nil
		}
		if !strings.HasPrefix(trimmed, "|") || !strings.HasSuffix(trimmed, "|") {
			return invalidf("line %d: not a table row: %q", n, line)
		}
		if err := fn(trimmed); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		return nil
	})
}

func eachLine(out []byte, fn func(n int, line string) error) error {
	if len(out) > 0 && out[len(out)-1] != '\n' {
		return invalidf("output is truncated (no final newline)")
	}
	scanner := bufio.NewScanner(bytes.NewReader(out))
	scanner.Buffer(make([]byte, 64<<10), maxCommandOutput)
	n := 0
	for scanner.Scan() {
		n++
		line := strings.TrimRight(scanner.Text(), " \r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if err := fn(n, line); err != nil {
			return err
		}
	}
	if err := scanner.Err(); err != nil {
		return invalidf("line %d: %v", n+1, err)
	}
	return nil
}

func atoiAll(values ...string) []int {
	nums := make([]int, len(values))
	for i, v := range values {
		n, err := strconv.Atoi(v)
		if err != nil || n > 1<<16 {
			return nil
		}
		nums[i] = n
	}
	return nums
}

// joinMIG pairs the MIG devices of one GPU from `nvidia-smi -L` (UUID and
// profile) with its GPU instances from `nvidia-smi mig -lgi` (placement) and
// their memory from `nvidia-smi mig -lgip`.
//
// These listings share no key but the profile. When `nvidia-smi -q -x` told
// each MIG device's GPU instance (byIndex, by MIG device index; see
// readMIGCaps), devices are paired with exactly theirs. Otherwise they are
// paired per profile, in listing order, and two instances of one profile
// may get each other's placement; that is harmless for placements, which
// are only used for the memory-slice counters and stay disjoint either way
// (device names derive from UUIDs). Only exactly paired devices are in the
// returned map of instances by MIG UUID, the input of their caps.
func joinMIG(gpu int, listed []smiMIG, instances []smiGPUInstance, memory map[profileKey]int64, byIndex map[int]migInstance) ([]device.MIGDevice, map[string]migInstance, error) {
	byProfile := map[string][]smiGPUInstance{}
	for _, gi := range instances {
		if gi.GPU == gpu {
			byProfile[gi.Profile] = append(byProfile[gi.Profile], gi)
		}
	}
	listedByProfile := map[string][]smiMIG{}
	for _, m := range listed {
		listedByProfile[m.Profile] = append(listedByProfile[m.Profile], m)
	}
	profiles := make([]string, 0, len(listedByProfile)+len(byProfile))
	for p := range listedByProfile {
		profiles = append(profiles, p)
	}
	for p := range byProfile {
		if _, ok := listedByProfile[p]; !ok {
			profiles = append(profiles, p)
		}
	}
	sort.Strings(profiles)

	var migs []device.MIGDevice
	exact := map[string]migInstance{}
	for _, profile := range profiles {
		if _, _, err := device.ParseProfile(profile); err != nil {
			return nil, nil, invalidf("GPU %d: %v", gpu, err)
		}
		devs, gis := listedByProfile[profile], byProfile[profile]
		if len(devs) != len(gis) {
			return nil, nil, invalidf("GPU %d: nvidia-smi -L lists %d MIG %s devices but nvidia-smi mig -lgi lists %d GPU instances (one compute instance per GPU instance is supported)",
				gpu, len(devs), profile, len(gis))
		}
		sort.SliceStable(devs, func(i, j int) bool { return devs[i].Device < devs[j].Device })
		sort.SliceStable(gis, func(i, j int) bool { return gis[i].InstanceID < gis[j].InstanceID })
		if paired := pairByInstance(devs, gis, byIndex); paired != nil {
			gis = paired
			for _, d := range devs {
				exact[d.UUID] = byIndex[d.Device]
			}
		}
		mib, ok := memory[profileKey{GPU: gpu, Profile: profile}]
		if !ok {
			return nil, nil, invalidf("GPU %d: nvidia-smi mig -lgip does not list profile %s", gpu, profile)
		}
		for i := range devs {
			migs = append(migs, device.MIGDevice{
				UUID:        devs[i].UUID,
				Profile:     profile,
				Placement:   gis[i].Placement,
				MemoryBytes: mib << 20,
			})
		}
	}
	return migs, exact, nil
}

// pairByInstance returns gis in the order of devs when byIndex names the GPU
// instance of every device and each is one of gis; nil otherwise.
func pairByInstance(devs []smiMIG, gis []smiGPUInstance, byIndex map[int]migInstance) []smiGPUInstance {
	byID := make(map[int]smiGPUInstance, len(gis))
	for _, gi := range gis {
		byID[gi.InstanceID] = gi
	}
	paired := make([]smiGPUInstance, 0, len(devs))
	for _, d := range devs {
		inst, ok := byIndex[d.Device]
		if !ok {
			return nil
		}
		gi, ok := byID[inst.GPUInstance]
		if !ok {
			return nil
		}
		delete(byID, inst.GPUInstance)
		paired = append(paired, gi)
	}
	return paired
}
