package discovery

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// migXML is `nvidia-smi -q -x` for migRow's GPU with listMIG's one MIG
// device (index 0) in GPU instance 1, compute instance 0.
const migXML = `<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
	<gpu id="00000000:07:00.0">
		<mig_devices>
			<mig_device>
				<index>0</index>
				<gpu_instance_id>1</gpu_instance_id>
				<compute_instance_id>0</compute_instance_id>
			</mig_device>
		</mig_devices>
	</gpu>
</nvidia_smi_log>
`

// withMIGCaps is withMIG with `nvidia-smi -q -x` answering xml and the
// driver's capability files of GPU instance 1 and its compute instance 0.
func withMIGCaps(xml, giAccess, ciAccess string) fakeRunner {
	f := withMIG(listMIG, lgiRow, lgipRows)
	f[strings.Join(QueryXMLArgs, " ")] = fakeResult{out: []byte(xml)}
	if giAccess != "" {
		f["cat capabilities/gpu0/mig/gi1/access"] = fakeResult{out: []byte(giAccess)}
	}
	if ciAccess != "" {
		f["cat capabilities/gpu0/mig/gi1/ci0/access"] = fakeResult{out: []byte(ciAccess)}
	}
	return f
}

// TestNvidiaSMIMIGCaps: a MIG device's nvidia-caps minors come from the
// driver's capability files of its GPU and compute instance, found through
// nvidia-smi -q -x. When any step fails, the device is still published (the
// other devices do not depend on it) but without caps, so that Prepare
// refuses it instead of guessing.
func TestNvidiaSMIMIGCaps(t *testing.T) {
	const access = "DeviceFileMinor: %s\nDeviceFileMode: 444\nDeviceFileModify: 1\n"
	gi, ci := strings.Replace(access, "%s", "12", 1), strings.Replace(access, "%s", "13", 1)
	tests := map[string]struct {
		runner fakeRunner
		want   string // the MIG device's summary
	}{
		"found": {
			runner: withMIGCaps(migXML, gi, ci),
			want:   "3g.20gb@4:4=20091 caps=12/13",
		},
		"nvidia-smi -q -x fails": {
			runner: func() fakeRunner {
				f := withMIGCaps(migXML, gi, ci)
				f[strings.Join(QueryXMLArgs, " ")] = fakeResult{err: &ExitError{Args: QueryXMLArgs, Code: 4, Output: []byte("Insufficient Permissions\n")}}
				return f
			}(),
			want: "3g.20gb@4:4=20091",
		},
		"nvidia-smi -q -x truncated": {
			runner: withMIGCaps(migXML[:len(migXML)/2], gi, ci),
			want:   "3g.20gb@4:4=20091",
		},
		"no such MIG device index": {
			runner: withMIGCaps(strings.Replace(migXML, "<index>0</index>", "<index>3</index>", 1), gi, ci),
			want:   "3g.20gb@4:4=20091",
		},
		"GPU instance not in nvidia-smi mig -lgi": {
			runner: withMIGCaps(strings.Replace(migXML, "<gpu_instance_id>1</gpu_instance_id>", "<gpu_instance_id>2</gpu_instance_id>", 1), gi, ci),
			want:   "3g.20gb@4:4=20091",
		},
		"instance IDs not numbers": {
			runner: withMIGCaps(strings.Replace(migXML, "<compute_instance_id>0</compute_instance_id>", "<compute_instance_id>N/A</compute_instance_id>", 1), gi, ci),
			want:   "3g.20gb@4:4=20091",
		},
		"no access file of the compute instance": {
			runner: withMIGCaps(migXML, gi, ""),
			want:   "3g.20gb@4:4=20091",
		},
		"access file without a minor": {
			runner: withMIGCaps(migXML, "DeviceFileMode: 444\n", ci),
			want:   "3g.20gb@4:4=20091",
		},
		"access file with a garbled minor": {
			runner: withMIGCaps(migXML, gi, strings.Replace(access, "%s", "-1", 1)),
			want:   "3g.20gb@4:4=20091",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gpus, err := discoverRecording(t, tc.runner)
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if len(gpus) != 1 {
				t.Fatalf("Discover: %v, want one GPU", summarizeGPUs(gpus))
			}
			if diff := cmp.Diff([]string{tc.want}, summarizeGPUs(gpus)[0].MIG); diff != "" {
				t.Errorf("MIG devices (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseMIGInstances(t *testing.T) {
	got, err := parseMIGInstances([]byte(strings.Replace(migXML, "</nvidia_smi_log>",
		"\t<gpu id=\"00000000:4E:00.0\">\n\t\t<mig_devices>None</mig_devices>\n\t</gpu>\n</nvidia_smi_log>", 1)))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[int]migInstance{
		"0000:07:00.0": {0: {GPUInstance: 1, ComputeInstance: 0}},
		"0000:4e:00.0": {},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("instances (-want +got):\n%s", diff)
	}

	for name, xml := range map[string]string{
		"GPU twice":        strings.Replace(migXML, "</nvidia_smi_log>", "\t<gpu id=\"00000000:07:00.0\"></gpu>\n</nvidia_smi_log>", 1),
		"MIG device twice": strings.Replace(migXML, "</mig_devices>", "\t<mig_device><index>0</index><gpu_instance_id>2</gpu_instance_id><compute_instance_id>0</compute_instance_id></mig_device>\n</mig_devices>", 1),
		"bad bus ID":       strings.Replace(migXML, "00000000:07:00.0", "../../etc", 1),
		"not XML":          "Failed to initialize NVML\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := parseMIGInstances([]byte(xml)); !errors.Is(err, ErrInvalidInput) {
				t.Errorf("parseMIGInstances: %v, want an invalid input error", err)
			}
		})
	}
}
