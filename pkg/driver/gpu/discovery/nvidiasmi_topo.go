package discovery

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// NVLink domains.
//
// GPUs connected by NVLink exchange data several times faster than over
// PCIe, so a pod with several GPUs wants them in one NVLink domain. The
// driver publishes the domain as the device attribute
// gpu.drasched.dev/nvlinkDomain, on each GPU and on its MIG devices: the
// scheduler's BestFit policy groups devices by it (it is one of the default
// topologyAttributes), so that it fills a domain already in use before it
// breaks a whole one, and a claim with `matchAttribute:
// gpu.drasched.dev/nvlinkDomain` gets all its devices from one domain. A GPU
// without an NVLink peer has no domain and no attribute, like a GPU of a
// PCIe-only host (L40S): a claim that matches on the attribute never gets it,
// since matchAttribute needs every device to have the attribute.
//
// The nvidia-smi backend reads the domains from `nvidia-smi topo -m`.

// nvlinkDomainPrefix starts the name of every NVLink domain this backend
// finds; see nvlinkDomainName.
const nvlinkDomainPrefix = "nvlink-"

// nvlinkDomainName names the NVLink domain whose members have these PCI bus
// IDs (normalised, so lowercase) after the lowest of them, which is also the
// member with the lowest index because nvidia-smi numbers GPUs in PCI order:
// "nvlink-0000:18:00.0".
//
// Why: NVIDIA's own DRA driver (k8s-dra-driver-gpu) identifies an NVLink
// domain, its "clique", by "<cluster UUID>.<clique ID>" from NVML's GPU
// fabric info: a value that every member reports alike, that comes from the
// hardware rather than from the order software happened to enumerate it, and
// that GPUs outside any clique simply do not have (no placeholder). That
// fabric info only identifies multi-node NVLink systems (NVIDIA's driver
// treats the all-zero cluster UUID of single-node ones as "no clique", and
// NVLink bridges have no fabric at all), and
// `nvidia-smi topo -m` shows links, not fabric IDs, so this backend follows
// the same rules with the identity it has: a PCI bus ID names a slot, so the
// name survives reboots, driver reloads, a changed enumeration order and the
// replacement of a board (whose UUID changes), and it only changes when its
// GPU leaves the domain, which is a real change of the domain. A counter
// ("domain-0") would instead depend on discovery order and could name
// another set of GPUs after such a change. Names only have to be equal within
// a node: matchAttribute and BestFit compare the devices of one node.
func nvlinkDomainName(busIDs []string) string {
	return nvlinkDomainPrefix + slices.Min(busIDs)
}

// readNVLinkDomains runs `nvidia-smi topo -m` and returns the NVLink domain
// of each GPU, by index, that has an NVLink peer.
//
// The domain is optional, like the PCIe root and NUMA node read from sysfs:
// without it the GPUs still work, placement just knows less. So a failing
// command or output this code cannot read leaves the domains out, with a log
// line, instead of failing discovery. The error is only for a cancelled
// context.
func (n *NvidiaSMI) readNVLinkDomains(ctx context.Context, rows []smiGPU) (map[int]string, error) {
	if len(rows) < 2 {
		// A lone GPU has no NVLink peer: no need to ask.
		return nil, nil
	}
	logger := klog.FromContext(ctx)
	out, err := n.Runner.Run(ctx, TopoArgs...)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		// Expected where the information does not exist, like missing
		// sysfs entries: recordings made before this command was run,
		// drivers or virtual GPUs without topology support.
		logger.V(4).Info("Leaving out NVLink domains", "err", err)
		return nil, nil
	}
	domains, err := parseNVLinkDomains(out, rows)
	if err != nil {
		// Output this code does not understand: worth a louder line,
		// because it means the parser needs to learn a new format.
		logger.V(2).Info("Leaving out NVLink domains", "err", err)
		return nil, nil
	}
	return domains, nil
}

// parseNVLinkDomains parses `nvidia-smi topo -m` and returns the NVLink
// domain of each GPU of the query output, by index, that has an NVLink peer.
// GPUs connected by NVLink, directly or through other GPUs, form one domain.
//
// The matrix must be complete and consistent, and must show exactly the GPUs
// the query listed: a malformed matrix is an error, never a guess, because a
// wrong domain would make the scheduler promise NVLink where there is none.
func parseNVLinkDomains(out []byte, gpus []smiGPU) (map[int]string, error) {
	m, err := parseTopoMatrix(out)
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi topo -m output: %w", err)
	}
	if m.GPUs != len(gpus) {
		return nil, invalidf("nvidia-smi topo -m shows %d GPUs but nvidia-smi --query-gpu lists %d", m.GPUs, len(gpus))
	}
	busIDs := make([]string, m.GPUs)
	for _, g := range gpus {
		if g.Index >= m.GPUs {
			return nil, invalidf("nvidia-smi --query-gpu lists GPU %d, which nvidia-smi topo -m does not show (it shows GPU0 to GPU%d)", g.Index, m.GPUs-1)
		}
		if busIDs[g.Index] != "" {
			return nil, invalidf("nvidia-smi --query-gpu lists GPU %d twice", g.Index)
		}
		busIDs[g.Index] = g.PCIBusID
	}

	// Connected components of the NVLink graph.
	domains := map[int]string{}
	visited := make([]bool, m.GPUs)
	for first := range m.GPUs {
		if visited[first] {
			continue
		}
		visited[first] = true
		members := []int{first}
		for next := 0; next < len(members); next++ {
			for peer := range m.GPUs {
				if m.NVLink[members[next]][peer] && !visited[peer] {
					visited[peer] = true
					members = append(members, peer)
				}
			}
		}
		if len(members) < 2 {
			continue
		}
		ids := make([]string, len(members))
		for i, member := range members {
			ids[i] = busIDs[member]
		}
		name := nvlinkDomainName(ids)
		for _, member := range members {
			domains[member] = name
		}
	}
	return domains, nil
}

// topoMatrix is the GPU-to-GPU part of `nvidia-smi topo -m`.
type topoMatrix struct {
	// GPUs is the number of GPUs, GPU0 to GPU<GPUs-1>.
	GPUs int
	// NVLink[i][j] says whether GPU i and GPU j are connected by NVLink.
	NVLink [][]bool
}

var (
	// sgrSequence matches the ANSI escape sequences (Select Graphic
	// Rendition) that nvidia-smi may wrap the header in to underline it;
	// captures from containers show them even without a terminal.
	sgrSequence = regexp.MustCompile("\x1b\\[[0-9;]*m")
	nvlinkCell  = regexp.MustCompile(`^NV([1-9][0-9]*)$`)
)

// topoTrailers are the columns after the device columns, whose headers
// contain spaces. Older drivers print fewer of them.
var topoTrailers = [][]string{
	{"CPU", "Affinity"},
	{"NUMA", "Affinity"},
	{"GPU", "NUMA", "ID"},
}

// pcieCells are the matrix entries of devices connected without NVLink.
var pcieCells = map[string]bool{
	"SYS":  true, // PCIe and the interconnect between NUMA nodes (QPI/UPI)
	"SOC":  true, // the old name of SYS
	"NODE": true, // PCIe and the interconnect between host bridges of a NUMA node
	"PHB":  true, // PCIe and a host bridge
	"PXB":  true, // several PCIe bridges, no host bridge
	"PIX":  true, // at most one PCIe bridge
}

// parseTopoMatrix parses `nvidia-smi topo -m`: a header of device columns
// (GPUs, then NICs) and affinity columns, one row per device, then a legend.
// Cells are separated by tabs, or by spaces when copied from a terminal;
// empty cells (a GPU without CPU affinity, the affinity columns of NIC rows)
// do not matter because only the device cells are read.
//
//		GPU0	GPU1	NIC0	CPU Affinity	NUMA Affinity	GPU NUMA ID
//	GPU0	 X 	NV18	PXB	0-55,112-167	0		N/A
//	GPU1	NV18	 X 	NODE	0-55,112-167	0		N/A
//	NIC0	PXB	NODE	 X
//
//	Legend:
//
//	  X    = Self
//	  ...
//
// The matrix does not depend on MIG mode.
func parseTopoMatrix(out []byte) (topoMatrix, error) {
	var columns []string // device column labels; rows have the same, in order
	gpus := 0            // columns[:gpus] are GPU0 to GPU<gpus-1>
	trailers := 0        // number of affinity columns
	var cells [][]string // device cells of each row so far
	legend := false
	err := eachLine(out, func(n int, line string) error {
		fields := strings.Fields(sgrSequence.ReplaceAllString(line, ""))
		switch {
		case legend || len(fields) == 0:
			return nil
		case fields[0] == "Legend:":
			legend = true
			return nil
		case columns == nil:
			var err error
			if columns, gpus, trailers, err = parseTopoHeader(fields); err != nil {
				return fmt.Errorf("line %d: %w", n, err)
			}
			return nil
		}
		row := len(cells)
		if row >= len(columns) {
			return invalidf("line %d: row %q after the last device row (%s)", n, fields[0], columns[len(columns)-1])
		}
		if fields[0] != columns[row] {
			return invalidf("line %d: row %q where the columns want %q", n, fields[0], columns[row])
		}
		values := fields[1:]
		if len(values) < len(columns) || len(values) > len(columns)+trailers {
			return invalidf("line %d: row %s has %d cells, want %d device cells and at most %d affinity cells", n, fields[0], len(values), len(columns), trailers)
		}
		for _, v := range values[len(columns):] {
			if v == "X" || pcieCells[v] || nvlinkCell.MatchString(v) {
				// A device cell among the affinity values: the row
				// has more device cells than there are columns.
				return invalidf("line %d: row %s has more device cells than the %d columns", n, fields[0], len(columns))
			}
		}
		for col, v := range values[:len(columns)] {
			switch {
			case col == row && v != "X":
				return invalidf("line %d: row %s has %q for itself, want X", n, fields[0], v)
			case col != row && v == "X":
				return invalidf("line %d: row %s has X (self) in column %s", n, fields[0], columns[col])
			case v != "X" && !pcieCells[v] && !nvlinkCell.MatchString(v):
				return invalidf("line %d: row %s, column %s: unknown connection %q", n, fields[0], columns[col], v)
			}
		}
		cells = append(cells, values[:len(columns)])
		return nil
	})
	if err != nil {
		return topoMatrix{}, err
	}
	if columns == nil {
		return topoMatrix{}, invalidf("no matrix")
	}
	if len(cells) < len(columns) {
		return topoMatrix{}, invalidf("%d rows for %d columns: no row for %s (truncated output?)", len(cells), len(columns), columns[len(cells)])
	}

	m := topoMatrix{GPUs: gpus, NVLink: make([][]bool, gpus)}
	for i := range gpus {
		m.NVLink[i] = make([]bool, gpus)
		for j := range gpus {
			m.NVLink[i][j] = nvlinkCell.MatchString(cells[i][j])
		}
	}
	for i := range gpus {
		for j := range i {
			if m.NVLink[i][j] != m.NVLink[j][i] {
				return topoMatrix{}, invalidf("%s to %s is %s but %s to %s is %s", columns[i], columns[j], cells[i][j], columns[j], columns[i], cells[j][i])
			}
		}
	}
	return m, nil
}

// parseTopoHeader splits the header fields of `nvidia-smi topo -m` into the
// device column labels, how many of them are GPUs, and the number of
// affinity columns after them. GPU columns come first, GPU0, GPU1, ... in
// order; the labels of other devices (NIC0, or mlx5_0 with older drivers)
// are not interpreted.
func parseTopoHeader(fields []string) (columns []string, gpus, trailers int, err error) {
	seen := map[string]bool{}
	for i := 0; i < len(fields); {
		if t := topoTrailerAt(fields[i:]); t > 0 {
			trailers++
			i += t
			continue
		}
		label := fields[i]
		switch {
		case trailers > 0:
			return nil, 0, 0, invalidf("header: column %q after the affinity columns", label)
		case seen[label]:
			return nil, 0, 0, invalidf("header: column %q appears twice", label)
		case strings.HasPrefix(label, "GPU"):
			// GPU columns are GPU0 to GPU<n-1>, first and in order:
			// anything else means the matrix cannot be mapped to
			// nvidia-smi's GPU indexes.
			if len(columns) != gpus {
				return nil, 0, 0, invalidf("header: GPU column %q after the other devices' columns", label)
			}
			if label != "GPU"+strconv.Itoa(gpus) {
				return nil, 0, 0, invalidf("header: column %q where GPU%d is expected", label, gpus)
			}
			gpus++
		}
		seen[label] = true
		columns = append(columns, label)
		i++
	}
	if gpus == 0 {
		return nil, 0, 0, invalidf("header %q has no GPU columns", strings.Join(fields, " "))
	}
	return columns, gpus, trailers, nil
}

// topoTrailerAt returns how many fields the affinity column header at the
// start of fields takes, 0 when there is none.
func topoTrailerAt(fields []string) int {
	for _, t := range topoTrailers {
		if len(fields) >= len(t) && slices.Equal(fields[:len(t)], t) {
			return len(t)
		}
	}
	return 0
}
