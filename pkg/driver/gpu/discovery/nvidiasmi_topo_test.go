package discovery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
)

// topoGPUs returns query rows for GPUs 0..n-1 with these bus IDs.
func topoGPUs(busIDs ...string) []smiGPU {
	gpus := make([]smiGPU, len(busIDs))
	for i, bus := range busIDs {
		gpus[i] = smiGPU{Index: i, PCIBusID: bus}
	}
	return gpus
}

var fourGPUs = topoGPUs("0000:17:00.0", "0000:31:00.0", "0000:b1:00.0", "0000:ca:00.0")

const topoLegend = `
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
`

// topoPairs is a 4-GPU PCIe host with NVLink bridges between GPU0 and GPU1
// and between GPU2 and GPU3, as nvidia-smi prints it: tab-separated, an
// empty cell before GPU NUMA ID, empty affinity cells on NIC rows.
const topoPairs = "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n" +
	"GPU0\t X \tNV4\tSYS\tSYS\tNODE\t0-31,64-95\t0\t\tN/A\n" +
	"GPU1\tNV4\t X \tSYS\tSYS\tNODE\t0-31,64-95\t0\t\tN/A\n" +
	"GPU2\tSYS\tSYS\t X \tNV4\tSYS\t32-63,96-127\t1\t\tN/A\n" +
	"GPU3\tSYS\tSYS\tNV4\t X \tSYS\t32-63,96-127\t1\t\tN/A\n" +
	"NIC0\tNODE\tNODE\tSYS\tSYS\t X \t\t\t\t\n" +
	topoLegend +
	"\nNIC Legend:\n\n  NIC0: mlx5_0\n\n"

var pairDomains = map[int]string{0: "nvlink-0000:17:00.0", 1: "nvlink-0000:17:00.0", 2: "nvlink-0000:b1:00.0", 3: "nvlink-0000:b1:00.0"}

// replaceLine replaces the line of topoPairs that starts with label.
func replaceLine(label, line string) string {
	lines := strings.Split(topoPairs, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, label+"\t") {
			lines[i] = line
		}
	}
	return strings.Join(lines, "\n")
}

func TestParseNVLinkDomains(t *testing.T) {
	tests := map[string]struct {
		out     string
		gpus    []smiGPU
		want    map[int]string
		wantErr string
	}{
		"two NVLink pairs: two domains": {
			out: topoPairs, gpus: fourGPUs, want: pairDomains,
		},
		"copied from a terminal: spaces instead of tabs": {
			out: `        GPU0    GPU1    GPU2    GPU3    NIC0    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NV12    SYS     SYS     SYS     0-23    0               N/A
GPU1    NV12     X      SYS     SYS     SYS     24-47   1               N/A
GPU2    SYS     SYS      X      NV12    SYS     48-71   2               N/A
GPU3    SYS     SYS     NV12     X      SYS     72-95   3               N/A
NIC0    SYS     SYS     SYS     SYS      X
` + topoLegend,
			gpus: fourGPUs, want: pairDomains,
		},
		"header underlined with ANSI escapes, GPUs without CPU affinity": {
			out: "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n" +
				"GPU0\t X \tNV18\tNV18\tNV18\tNODE\t0-35\t0\t\tN/A\n" +
				"GPU1\tNV18\t X \tNV18\tNV18\tNODE\t0-35\t0\t\tN/A\n" +
				"GPU2\tNV18\tNV18\t X \tNV18\tNODE\t\t1\t\tN/A\n" +
				"GPU3\tNV18\tNV18\tNV18\t X \tNODE\t\t1\t\tN/A\n" +
				"NIC0\tNODE\tNODE\tNODE\tNODE\t X \t\t\t\t\n" + topoLegend,
			gpus: fourGPUs,
			want: map[int]string{0: "nvlink-0000:17:00.0", 1: "nvlink-0000:17:00.0", 2: "nvlink-0000:17:00.0", 3: "nvlink-0000:17:00.0"},
		},
		"older driver: NICs named after their device, no GPU NUMA ID, SOC for SYS": {
			out: "\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\n" +
				"GPU0\t X \tSOC\tPHB\t0-13\n" +
				"GPU1\tSOC\t X \tSOC\t14-27\n" +
				"mlx5_0\tPHB\tSOC\t X \t\n" + topoLegend,
			gpus: fourGPUs[:2], want: map[int]string{},
		},
		"NVLink is transitive: a chain is one domain, a GPU without a peer has none": {
			out: "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n" +
				"GPU0\t X \tSYS\tNV4\tSYS\t0-31\t0\n" +
				"GPU1\tSYS\t X \tSYS\tPIX\t0-31\t0\n" +
				"GPU2\tNV4\tSYS\t X \tNV4\t0-31\t0\n" +
				"GPU3\tSYS\tPIX\tNV4\t X \t0-31\t0\n" + topoLegend,
			gpus: fourGPUs,
			want: map[int]string{0: "nvlink-0000:17:00.0", 2: "nvlink-0000:17:00.0", 3: "nvlink-0000:17:00.0"},
		},
		"a domain is named after its lowest bus ID": {
			out: "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n" +
				"GPU0\t X \tPHB\tPHB\t0-31\t0\n" +
				"GPU1\tPHB\t X \tNV12\t0-31\t0\n" +
				"GPU2\tPHB\tNV12\t X \t0-31\t0\n" + topoLegend,
			gpus: topoGPUs("0000:01:00.0", "0000:c1:00.0", "0000:41:00.0"),
			want: map[int]string{1: "nvlink-0000:41:00.0", 2: "nvlink-0000:41:00.0"},
		},
		"PCIe only: no domains": {
			out: "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n" +
				"GPU0\t X \tNODE\t0-31,64-95\t0\t\tN/A\n" +
				"GPU1\tNODE\t X \t0-31,64-95\t0\t\tN/A\n" + topoLegend,
			gpus: fourGPUs[:2], want: map[int]string{},
		},
		"one GPU": {
			out:  "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-31\t0\t\tN/A\n" + topoLegend,
			gpus: fourGPUs[:1], want: map[int]string{},
		},

		"empty output": {
			out: "", gpus: fourGPUs, wantErr: "no matrix",
		},
		"truncated in a row": {
			out: topoPairs[:strings.Index(topoPairs, "GPU2\t")+10], gpus: fourGPUs, wantErr: "truncated",
		},
		"truncated after a row: the NIC row is missing": {
			out: topoPairs[:strings.Index(topoPairs, "NIC0\tNODE")], gpus: fourGPUs, wantErr: "4 rows for 5 columns: no row for NIC0",
		},
		"an error message instead of the matrix": {
			out: "Failed to initialize NVML: Unknown Error\n", gpus: fourGPUs, wantErr: "has no GPU columns",
		},
		"a row with a cell missing": {
			out:     replaceLine("NIC0", "NIC0\tNODE\tNODE\tSYS\t X "),
			gpus:    fourGPUs,
			wantErr: "row NIC0 has 4 cells, want 5 device cells",
		},
		"a GPU row with a cell missing shifts an affinity into the matrix": {
			out:     replaceLine("GPU1", "GPU1\tNV4\t X \tSYS\tNODE\t0-31,64-95\t0\t\tN/A"),
			gpus:    fourGPUs,
			wantErr: `row GPU1, column NIC0: unknown connection "0-31,64-95"`,
		},
		"a row with a cell too many": {
			out:     replaceLine("GPU1", "GPU1\tNV4\t X \tSYS\tSYS\tSYS\tNODE\t\t0\t\tN/A"),
			gpus:    fourGPUs,
			wantErr: "row GPU1 has more device cells than the 5 columns",
		},
		"a row with more cells than columns": {
			out:     replaceLine("GPU1", "GPU1\tNV4\t X \tSYS\tSYS\tNODE\t0-31,64-95\t0\tN/A\tN/A\textra"),
			gpus:    fourGPUs,
			wantErr: "row GPU1 has 10 cells, want 5 device cells and at most 3 affinity cells",
		},
		"an unknown connection": {
			out:     strings.Replace(topoPairs, "GPU0\t X \tNV4", "GPU0\t X \tNVX", 1),
			gpus:    fourGPUs,
			wantErr: `row GPU0, column GPU1: unknown connection "NVX"`,
		},
		"NV0 is not a link": {
			out:     strings.Replace(topoPairs, "GPU0\t X \tNV4", "GPU0\t X \tNV0", 1),
			gpus:    fourGPUs,
			wantErr: `unknown connection "NV0"`,
		},
		"a device connected to itself by anything but X": {
			out:     strings.Replace(topoPairs, "GPU0\t X ", "GPU0\tNV4", 1),
			gpus:    fourGPUs,
			wantErr: `row GPU0 has "NV4" for itself`,
		},
		"X off the diagonal": {
			out:     strings.Replace(topoPairs, "GPU0\t X \tNV4\tSYS", "GPU0\t X \tNV4\t X ", 1),
			gpus:    fourGPUs,
			wantErr: "row GPU0 has X (self) in column GPU2",
		},
		"NVLink in one direction only": {
			out:     strings.Replace(topoPairs, "GPU1\tNV4", "GPU1\tSYS", 1),
			gpus:    fourGPUs,
			wantErr: "GPU1 to GPU0 is SYS but GPU0 to GPU1 is NV4",
		},
		"rows out of order": {
			out:     strings.Replace(strings.Replace(topoPairs, "GPU0\t X ", "GPUx\t X ", 1), "GPU1\tNV4\t X ", "GPU0\tNV4\t X ", 1),
			gpus:    fourGPUs,
			wantErr: `row "GPUx" where the columns want "GPU0"`,
		},
		"a row without a column": {
			out:     strings.Replace(topoPairs, "\nLegend:", "NIC1\tSYS\tSYS\tSYS\tSYS\tSYS\n\nLegend:", 1),
			gpus:    fourGPUs,
			wantErr: `row "NIC1" after the last device row (NIC0)`,
		},
		"GPU columns with a gap": {
			out:     strings.Replace(topoPairs, "\tGPU3\tNIC0", "\tGPU4\tNIC0", 1),
			gpus:    fourGPUs,
			wantErr: `column "GPU4" where GPU3 is expected`,
		},
		"a GPU column after the NICs": {
			out:     strings.Replace(topoPairs, "\tGPU3\tNIC0", "\tNIC0\tGPU3", 1),
			gpus:    fourGPUs,
			wantErr: `GPU column "GPU3" after the other devices' columns`,
		},
		"a column twice": {
			out:     strings.Replace(topoPairs, "\tNIC0\tCPU", "\tGPU3\tCPU", 1),
			gpus:    fourGPUs,
			wantErr: `column "GPU3" appears twice`,
		},
		"more GPUs than the query lists": {
			out: topoPairs, gpus: fourGPUs[:3], wantErr: "nvidia-smi topo -m shows 4 GPUs but nvidia-smi --query-gpu lists 3",
		},
		"fewer GPUs than the query lists": {
			out: topoPairs, gpus: topoGPUs("0000:17:00.0", "0000:31:00.0", "0000:b1:00.0", "0000:ca:00.0", "0000:db:00.0"), wantErr: "shows 4 GPUs but nvidia-smi --query-gpu lists 5",
		},
		"a query GPU index the matrix does not show": {
			out:     topoPairs,
			gpus:    append(fourGPUs[:3:3], smiGPU{Index: 7, PCIBusID: "0000:db:00.0"}),
			wantErr: "lists GPU 7, which nvidia-smi topo -m does not show (it shows GPU0 to GPU3)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseNVLinkDomains([]byte(tc.out), tc.gpus)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalidInput) {
					t.Fatalf("got domains %v, error %v; want an invalid-input error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseNVLinkDomains: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("domains (-want +got):\n%s", diff)
			}
		})
	}
}

// callRecorder is a Runner that notes which commands ran.
type callRecorder struct {
	Runner
	calls []string
}

func (c *callRecorder) Run(ctx context.Context, args ...string) ([]byte, error) {
	c.calls = append(c.calls, strings.Join(args, " "))
	return c.Runner.Run(ctx, args...)
}

// TestNvidiaSMINVLinkDomainFallback: the NVLink domain is optional. When
// `topo -m` fails or prints something this code cannot read, discovery
// still succeeds, without domains.
func TestNvidiaSMINVLinkDomainFallback(t *testing.T) {
	secondRow := strings.NewReplacer("0, ", "1, ", "c16c", "c16d", ":18:", ":2A:").Replace(goodRow)
	twoGPUs := `	GPU0	GPU1	CPU Affinity	NUMA Affinity	GPU NUMA ID
GPU0	 X 	NV18	0-55,112-167	0		N/A
GPU1	NV18	 X 	0-55,112-167	0		N/A
` + topoLegend
	withTopo := func(r fakeResult) fakeRunner {
		f := query(goodRow + secondRow)
		f[strings.Join(TopoArgs, " ")] = r
		return f
	}
	tests := map[string]struct {
		runner fakeRunner
		want   []string
	}{
		"topo -m works": {
			runner: withTopo(fakeResult{out: []byte(twoGPUs)}),
			want:   []string{"nvlink-0000:18:00.0", "nvlink-0000:18:00.0"},
		},
		"topo -m fails": {
			runner: withTopo(fakeResult{err: &ExitError{Args: TopoArgs, Code: 3, Output: []byte("Topology not supported\n")}}),
			want:   []string{"", ""},
		},
		"topo -m was not recorded": {
			runner: query(goodRow + secondRow),
			want:   []string{"", ""},
		},
		"topo -m prints an unknown format": {
			runner: withTopo(fakeResult{out: []byte(strings.Replace(twoGPUs, "NV18", "C2C", 1))}),
			want:   []string{"", ""},
		},
		"topo -m shows fewer GPUs than the query": {
			runner: withTopo(fakeResult{out: []byte("\tGPU0\tCPU Affinity\nGPU0\t X \t0-55\n" + topoLegend)}),
			want:   []string{"", ""},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gpus, err := discoverRecording(t, tc.runner)
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			var got []string
			for _, g := range gpus {
				got = append(got, g.NVLinkDomain)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("NVLink domains (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("a lone GPU has no peer: topo -m does not run", func(t *testing.T) {
		runner := &callRecorder{Runner: query(goodRow)}
		if _, err := discoverRecording(t, runner); err != nil {
			t.Fatalf("Discover: %v", err)
		}
		if diff := cmp.Diff([]string{strings.Join(QueryArgs, " ")}, runner.calls); diff != "" {
			t.Errorf("commands (-want +got):\n%s", diff)
		}
	})

	t.Run("a cancelled discovery is not a topo -m failure", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancelCause(ctx)
		cancel(fmt.Errorf("shutting down"))
		empty := t.TempDir()
		b := &NvidiaSMI{Runner: query(goodRow + secondRow), SysfsRoot: empty, NvidiaProcDir: empty}
		if gpus, err := b.Discover(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Discover returned %d GPUs and error %v, want the context's error", len(gpus), err)
		}
	})
}
