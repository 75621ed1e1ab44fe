package app

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/drasched/drasched/pkg/driver/gpu"
	"github.com/drasched/drasched/pkg/driver/gpu/device"
	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
)

func newDiscoverCommand(logging *pflag.FlagSet) *cobra.Command {
	opts := newDiscoveryOptions()
	var printSlices bool
	var record string
	cmd := &cobra.Command{
		Use:   "discover",
		Short: "Discover the node's GPUs, print them or the ResourceSlices that would be published, and exit",
		Long: `discover runs the same discovery and slice building as the plugin, prints the
result and exits. Without --print-slices it prints a table of the devices;
with it, the ResourceSlices as YAML.

A dry run anywhere:
  gpu-kubelet-plugin discover --print-slices --node-name=n1 --backend=inventory --inventory=config/inventory/a100-mig-8.yaml
  gpu-kubelet-plugin discover --print-slices --node-name=n1 --nvidia-smi-output=transcript.txt

On a GPU host, record what nvidia-smi says, to attach to a bug report or
replay later:
  gpu-kubelet-plugin discover --node-name=$(hostname) --record-nvidia-smi=transcript.txt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.nodeName == "" {
				// A dry run does not need the real node name.
				opts.nodeName, _ = os.Hostname()
			}
			if err := opts.validate(); err != nil {
				return err
			}
			if record != "" {
				if opts.backend != discovery.BackendNvidiaSMI {
					return errors.New("--record-nvidia-smi needs --backend=nvidia-smi")
				}
				opts.recordedNvidiaSMI = &discovery.Recorder{}
			}
			return discover(cmd, opts, printSlices, record)
		},
	}
	fss := &cliflag.NamedFlagSets{}
	opts.addFlags(fss.FlagSet("discovery"))
	out := fss.FlagSet("output")
	out.BoolVar(&printSlices, "print-slices", false, "Print the ResourceSlices as YAML instead of a device table.")
	out.StringVar(&record, "record-nvidia-smi", "", "Write a transcript of the nvidia-smi commands and their output to this file; --nvidia-smi-output replays it.")
	setHelp(cmd, fss, logging)
	return cmd
}

func discover(cmd *cobra.Command, opts *discoveryOptions, printSlices bool, record string) error {
	ctx := cmd.Context()
	d, err := opts.discoverer()
	if err != nil {
		return err
	}
	gpus, err := d.Discover(ctx)
	if opts.recordedNvidiaSMI != nil {
		// Written even when parsing failed: that is when it is needed.
		if recErr := writeRecording(record, opts.recordedNvidiaSMI); recErr != nil {
			err = errors.Join(err, recErr)
		}
	}
	if err != nil {
		return fmt.Errorf("discover devices with %s: %w", d, err)
	}
	klog.FromContext(ctx).V(2).Info("Discovered devices", "discovery", d.String(), "gpus", len(gpus))
	if !printSlices {
		return printDevices(cmd.OutOrStdout(), gpus)
	}
	slices, err := gpu.BuildResourceSlices(gpu.SliceOptions{DriverName: opts.driverName, NodeName: opts.nodeName}, gpus)
	if err != nil {
		return err
	}
	return printYAML(cmd.OutOrStdout(), slices)
}

func writeRecording(path string, rec *discovery.Recorder) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write nvidia-smi transcript: %w", err)
	}
	if _, err := rec.WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("write nvidia-smi transcript %s: %w", path, err)
	}
	return f.Close()
}

// printYAML writes the slices as a multi-document YAML stream that kubectl
// accepts.
func printYAML(w io.Writer, slices []*resourceapi.ResourceSlice) error {
	for i, s := range slices {
		out, err := yaml.Marshal(s)
		if err != nil {
			return fmt.Errorf("encode ResourceSlice %s: %w", s.Name, err)
		}
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(out); err != nil {
			return err
		}
	}
	return nil
}

func printDevices(w io.Writer, gpus []device.GPU) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// tabwriter buffers; write errors surface in Flush.
	_, _ = fmt.Fprintln(tw, "NAME\tTYPE\tUUID\tPRODUCT\tMEMORY\tPCI BUS ID\tNUMA\tHEALTH")
	for _, ref := range device.Refs(gpus) {
		memory := ref.GPU.MemoryBytes
		profile := ""
		if ref.MIG != nil {
			memory = ref.MIG.MemoryBytes
			profile = " " + ref.MIG.Profile
		}
		numa := "-"
		if ref.GPU.NUMANode != nil {
			numa = strconv.Itoa(*ref.GPU.NUMANode)
		}
		health := string(device.Healthy)
		if !ref.GPU.Health.IsHealthy() {
			health = string(ref.GPU.Health.Status) + " (" + ref.GPU.Health.Reason + ")"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ref.Name(), ref.Type(), ref.UUID(), ref.GPU.ProductName+profile,
			resource.NewQuantity(memory, resource.BinarySI), ref.GPU.PCIBusID, numa, health)
	}
	return tw.Flush()
}
