package discovery

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// The nvidia-smi commands the backend runs. The argument lists are fixed:
// nothing from the cluster or the node ever reaches the command line.
var (
	queryFields = []string{
		"index",
		"uuid",
		"name",
		"pci.bus_id",
		"memory.total",
		"driver_version",
		"compute_cap",
		"mig.mode.current",
		"ecc.errors.uncorrected.volatile.total",
	}
	// QueryArgs lists the GPUs, one CSV row each.
	QueryArgs = []string{"--query-gpu=" + strings.Join(queryFields, ","), "--format=csv,noheader,nounits"}
	// ListArgs lists GPUs and MIG devices with their UUIDs and profiles.
	ListArgs = []string{"-L"}
	// ListGPUInstancesArgs lists MIG GPU instances with their placements.
	ListGPUInstancesArgs = []string{"mig", "-lgi"}
	// ListGPUInstanceProfilesArgs lists MIG profiles with their memory.
	ListGPUInstanceProfilesArgs = []string{"mig", "-lgip"}
	// QueryXMLArgs prints everything nvidia-smi knows as XML, read for the
	// GPU and compute instances of MIG devices (see readMIGCaps).
	QueryXMLArgs = []string{"-q", "-x"}
	// TopoArgs prints the topology matrix, read for NVLink domains.
	TopoArgs = []string{"topo", "-m"}
)

// DefaultNvidiaSMITimeout bounds one nvidia-smi run. A GPU stuck in the
// driver can make nvidia-smi hang; discovery must not hang with it.
const DefaultNvidiaSMITimeout = 30 * time.Second

// maxCommandOutput bounds what is read from nvidia-smi: far above what a
// node with 64 GPUs prints, far below what could hurt the plugin.
const maxCommandOutput = 8 << 20

// Runner runs nvidia-smi with the given arguments and returns its standard
// output.
type Runner interface {
	Run(ctx context.Context, args ...string) ([]byte, error)
}

// ExitError is returned by ExecRunner when nvidia-smi exits with an error.
// nvidia-smi prints most error messages on standard output, so Output keeps
// it for the caller to inspect.
type ExitError struct {
	Args   []string
	Code   int
	Output []byte
	Stderr []byte
}

func (e *ExitError) Error() string {
	msg := strings.TrimSpace(string(e.Stderr))
	if msg == "" {
		msg = strings.TrimSpace(string(e.Output))
	}
	if len(msg) > 512 {
		msg = msg[:512] + "..."
	}
	return fmt.Sprintf("nvidia-smi %s exited with status %d: %s", strings.Join(e.Args, " "), e.Code, msg)
}

// ExecRunner runs the nvidia-smi binary.
type ExecRunner struct {
	// Path is the binary; empty means "nvidia-smi" looked up on PATH.
	Path string
	// Timeout bounds each run; zero means DefaultNvidiaSMITimeout.
	Timeout time.Duration
}

// Run implements Runner.
func (r ExecRunner) Run(ctx context.Context, args ...string) ([]byte, error) {
	path := r.Path
	if path == "" {
		var err error
		if path, err = exec.LookPath("nvidia-smi"); err != nil {
			return nil, fmt.Errorf("nvidia-smi not found on PATH (set --nvidia-smi): %w", err)
		}
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultNvidiaSMITimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	stdout := &limitedBuffer{max: maxCommandOutput}
	stderr := &limitedBuffer{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	if stdout.overflow {
		return nil, invalidf("nvidia-smi %s printed more than %d bytes", strings.Join(args, " "), maxCommandOutput)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("nvidia-smi %s: %w", strings.Join(args, " "), ctx.Err())
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return nil, &ExitError{Args: args, Code: exitErr.ExitCode(), Output: stdout.Bytes(), Stderr: stderr.Bytes()}
	}
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", path, err)
	}
	return stdout.Bytes(), nil
}

type limitedBuffer struct {
	bytes.Buffer
	max      int
	overflow bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		b.overflow = true
		return 0, errors.New("output too large")
	}
	return b.Buffer.Write(p)
}

// A recording is a transcript of nvidia-smi runs, as a shell session shows
// them: each command on a line starting with "$ nvidia-smi ", followed by
// its output. Lines starting with "#" before the first command are comments.
//
//	# 8x H100 80GB HBM3, driver 550.54.15
//	$ nvidia-smi --query-gpu=index,uuid,... --format=csv,noheader,nounits
//	0, GPU-..., NVIDIA H100 80GB HBM3, 00000000:18:00.0, 81559, ...
//
// The files discovery read from the driver's /proc directory follow as
// "$ cat /proc/driver/nvidia/<name>" lines with their content, under that
// path whatever --nvidia-proc-dir was, so that a replay sees the minor
// numbers the host had; a file missing from the transcript replays as
// missing.
//
// `gpu-kubelet-plugin discover --record-nvidia-smi FILE` writes one from the
// live commands; `--nvidia-smi-output FILE` replays it, through the same
// parsing code.
const (
	recordingPrompt     = "$ nvidia-smi "
	recordingFilePrompt = "$ cat " + DefaultNvidiaProcDir + "/"
)

// Recording replays a transcript. It implements Runner and ProcFiles.
type Recording struct {
	outputs map[string][]byte
	files   map[string][]byte
}

// ParseRecording reads a transcript.
func ParseRecording(data []byte) (*Recording, error) {
	rec := &Recording{outputs: map[string][]byte{}, files: map[string][]byte{}}
	// current is the command or file whose output is being read; into
	// says where it goes.
	var current string
	var into map[string][]byte
	var out bytes.Buffer
	flush := func() {
		if current != "" {
			into[current] = bytes.Clone(out.Bytes())
		}
		out.Reset()
	}
	scanner := bufio.NewScanner(bytes.NewReader(data))
	scanner.Buffer(make([]byte, 64<<10), maxCommandOutput)
	line := 0
	for scanner.Scan() {
		line++
		text := scanner.Text()
		switch {
		case strings.HasPrefix(text, recordingPrompt):
			flush()
			current, into = strings.TrimSpace(strings.TrimPrefix(text, recordingPrompt)), rec.outputs
			if _, dup := into[current]; dup {
				return nil, invalidf("recording line %d: command %q appears twice", line, current)
			}
		case strings.HasPrefix(text, recordingFilePrompt):
			flush()
			current, into = strings.TrimSpace(strings.TrimPrefix(text, recordingFilePrompt)), rec.files
			if _, dup := into[current]; dup || current == "" {
				return nil, invalidf("recording line %d: file %q appears twice or has no name", line, current)
			}
		case current == "":
			if strings.TrimSpace(text) != "" && !strings.HasPrefix(text, "#") {
				return nil, invalidf("recording line %d: output before the first %q line", line, strings.TrimSpace(recordingPrompt))
			}
		default:
			out.WriteString(text)
			out.WriteByte('\n')
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, invalidf("recording line %d: %v", line+1, err)
	}
	flush()
	if len(rec.outputs) == 0 {
		return nil, invalidf("recording has no %q lines", strings.TrimSpace(recordingPrompt))
	}
	return rec, nil
}

// LoadRecording reads a transcript file.
func LoadRecording(path string) (*Recording, error) {
	data, err := readLimited(path, maxCommandOutput)
	if err != nil {
		return nil, err
	}
	rec, err := ParseRecording(data)
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi recording %s: %w", path, err)
	}
	return rec, nil
}

// Run implements Runner by looking up the recorded output.
func (r *Recording) Run(_ context.Context, args ...string) ([]byte, error) {
	out, ok := r.outputs[strings.Join(args, " ")]
	if !ok {
		return nil, invalidf("recording has no output for `nvidia-smi %s`", strings.Join(args, " "))
	}
	return out, nil
}

// ReadProcFile implements ProcFiles with the recorded files.
func (r *Recording) ReadProcFile(name string) ([]byte, error) {
	data, ok := r.files[name]
	if !ok {
		return nil, fmt.Errorf("recording has no `cat %s%s`: %w", strings.TrimPrefix(recordingFilePrompt, "$ cat "), name, fs.ErrNotExist)
	}
	return data, nil
}

// Recorder wraps a Runner and writes a transcript of every successful run
// and every file read through it, for bug reports and new test data.
type Recorder struct {
	Runner Runner
	// ProcFiles reads the driver's /proc files: ProcDir on a host, the
	// Recording when re-recording a replay.
	ProcFiles ProcFiles

	// mu guards transcript: discovery may run from the periodic rescan and
	// from an fsnotify event at once.
	mu         sync.Mutex
	transcript bytes.Buffer
}

// Run implements Runner.
func (r *Recorder) Run(ctx context.Context, args ...string) ([]byte, error) {
	out, err := r.Runner.Run(ctx, args...)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.transcript.WriteString(recordingPrompt + strings.Join(args, " ") + "\n")
	r.transcript.Write(out)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		r.transcript.WriteByte('\n')
	}
	return out, nil
}

// ReadProcFile implements ProcFiles. Only files that could be read are
// recorded; the others replay as missing.
func (r *Recorder) ReadProcFile(name string) ([]byte, error) {
	if r.ProcFiles == nil {
		return nil, errors.New("recorder has no ProcFiles to read the driver's /proc files from")
	}
	data, err := r.ProcFiles.ReadProcFile(name)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.transcript.WriteString(recordingFilePrompt + name + "\n")
	r.transcript.Write(data)
	if len(data) > 0 && data[len(data)-1] != '\n' {
		r.transcript.WriteByte('\n')
	}
	return data, nil
}

// WriteTo writes the transcript so far.
func (r *Recorder) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, err := w.Write(r.transcript.Bytes())
	return int64(n), err
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only: a close error loses nothing
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, invalidf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}
