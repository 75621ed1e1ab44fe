package gpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	kjson "sigs.k8s.io/json"
)

// The opaque per-claim configuration, passed in a claim's or a
// DeviceClass's spec.devices.config[].opaque.parameters with the driver's
// name:
//
//	apiVersion: gpu.drasched.dev/v1alpha1
//	kind: GPUConfig
//	sharing:
//	  strategy: TimeSlicing      # or MPS
//	  timeSlicing:
//	    interval: Short          # Default, Short, Medium, Long
//	  mps:
//	    activeThreadPercentage: 50
const (
	ConfigAPIVersion = "gpu.drasched.dev/v1alpha1"
	ConfigKind       = "GPUConfig"
)

// GPUConfig is the opaque configuration of a claim's GPUs.
type GPUConfig struct {
	metav1.TypeMeta `json:",inline"`
	// Sharing says how the containers and pods sharing the claim share its
	// GPUs. Unset means the driver's default (time-slicing, default
	// interval).
	Sharing *Sharing `json:"sharing,omitempty"`
}

// SharingStrategy names a way of sharing a GPU.
type SharingStrategy string

const (
	// TimeSlicing shares a GPU by giving each process time slices.
	TimeSlicing SharingStrategy = "TimeSlicing"
	// MPS shares a GPU through the CUDA Multi-Process Service.
	MPS SharingStrategy = "MPS"
)

// TimeSliceInterval is one of the time-slice lengths NVIDIA's compute
// policy offers.
type TimeSliceInterval string

// Time-slice intervals.
const (
	DefaultTimeSlice TimeSliceInterval = "Default"
	ShortTimeSlice   TimeSliceInterval = "Short"
	MediumTimeSlice  TimeSliceInterval = "Medium"
	LongTimeSlice    TimeSliceInterval = "Long"
)

// Sharing configures GPU sharing; exactly the member of its strategy may be
// set.
type Sharing struct {
	Strategy    SharingStrategy    `json:"strategy"`
	TimeSlicing *TimeSlicingConfig `json:"timeSlicing,omitempty"`
	MPS         *MPSConfig         `json:"mps,omitempty"`
}

// TimeSlicingConfig configures the TimeSlicing strategy.
type TimeSlicingConfig struct {
	Interval TimeSliceInterval `json:"interval,omitempty"`
}

// MPSConfig configures the MPS strategy.
type MPSConfig struct {
	// ActiveThreadPercentage limits the share of the GPU's threads each
	// client may use, 1-100.
	ActiveThreadPercentage *int `json:"activeThreadPercentage,omitempty"`
}

// ErrInvalidConfig is wrapped by every error about an opaque configuration,
// so that Prepare reports it as the claim's problem.
var ErrInvalidConfig = errors.New("invalid GPU configuration")

// DecodeConfig decodes opaque parameters strictly: unknown and duplicate
// fields are errors, field names are case-sensitive. The result is
// validated and defaulted.
func DecodeConfig(raw []byte) (*GPUConfig, error) {
	var cfg GPUConfig
	strictErrs, err := kjson.UnmarshalStrict(raw, &cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: decode: %w", ErrInvalidConfig, err)
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(strictErrs...))
	}
	if errs := cfg.validate(); len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, errs.ToAggregate())
	}
	cfg.setDefaults()
	return &cfg, nil
}

func (c *GPUConfig) validate() field.ErrorList {
	var errs field.ErrorList
	if c.APIVersion != ConfigAPIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), c.APIVersion, []string{ConfigAPIVersion}))
	}
	if c.Kind != ConfigKind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), c.Kind, []string{ConfigKind}))
	}
	if c.Sharing == nil {
		return errs
	}
	p := field.NewPath("sharing")
	switch c.Sharing.Strategy {
	case TimeSlicing:
		if c.Sharing.MPS != nil {
			errs = append(errs, field.Forbidden(p.Child("mps"), "only with strategy MPS"))
		}
		if ts := c.Sharing.TimeSlicing; ts != nil && ts.Interval != "" {
			valid := []TimeSliceInterval{DefaultTimeSlice, ShortTimeSlice, MediumTimeSlice, LongTimeSlice}
			if !slices.Contains(valid, ts.Interval) {
				errs = append(errs, field.NotSupported(p.Child("timeSlicing", "interval"), ts.Interval, valid))
			}
		}
	case MPS:
		if c.Sharing.TimeSlicing != nil {
			errs = append(errs, field.Forbidden(p.Child("timeSlicing"), "only with strategy TimeSlicing"))
		}
		if m := c.Sharing.MPS; m != nil && m.ActiveThreadPercentage != nil && (*m.ActiveThreadPercentage < 1 || *m.ActiveThreadPercentage > 100) {
			errs = append(errs, field.Invalid(p.Child("mps", "activeThreadPercentage"), *m.ActiveThreadPercentage, "must be between 1 and 100"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("strategy"), c.Sharing.Strategy, []SharingStrategy{TimeSlicing, MPS}))
	}
	return errs
}

func (c *GPUConfig) setDefaults() {
	if c.Sharing == nil {
		c.Sharing = &Sharing{Strategy: TimeSlicing}
	}
	if c.Sharing.Strategy == TimeSlicing {
		if c.Sharing.TimeSlicing == nil {
			c.Sharing.TimeSlicing = &TimeSlicingConfig{}
		}
		if c.Sharing.TimeSlicing.Interval == "" {
			c.Sharing.TimeSlicing.Interval = DefaultTimeSlice
		}
	}
	if c.Sharing.Strategy == MPS && c.Sharing.MPS == nil {
		c.Sharing.MPS = &MPSConfig{}
	}
}

// DefaultConfig is the configuration of devices that have none.
func DefaultConfig() *GPUConfig {
	c := &GPUConfig{TypeMeta: metav1.TypeMeta{APIVersion: ConfigAPIVersion, Kind: ConfigKind}}
	c.setDefaults()
	return c
}

// Env returns the container environment that carries the configuration to
// the workload and the NVIDIA container runtime hooks.
func (c *GPUConfig) Env() []string {
	switch c.Sharing.Strategy {
	case MPS:
		env := []string{"DRASCHED_GPU_SHARING=MPS"}
		if p := c.Sharing.MPS.ActiveThreadPercentage; p != nil {
			env = append(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="+strconv.Itoa(*p))
		}
		return env
	default:
		return []string{"DRASCHED_GPU_SHARING=TimeSlicing", "DRASCHED_GPU_TIMESLICE_INTERVAL=" + string(c.Sharing.TimeSlicing.Interval)}
	}
}

// Canonical is the normalised JSON of the configuration, as stored in the
// checkpoint.
func (c *GPUConfig) Canonical() json.RawMessage {
	raw, err := json.Marshal(c)
	if err != nil {
		// GPUConfig has only strings, pointers and ints: it always encodes.
		panic(fmt.Sprintf("encode GPUConfig: %v", err))
	}
	return raw
}

// configForRequest returns the configuration that applies to the devices
// allocated for one request: the last matching opaque configuration for this
// driver, class configurations before claim configurations, as upstream
// orders them. Every configuration for this driver is decoded, whether it
// applies or not, so that a broken one is reported rather than ignored.
func configForRequest(driverName string, configs []resourceapi.DeviceAllocationConfiguration, request string) (*GPUConfig, error) {
	var fromClass, fromClaim *GPUConfig
	base := resourceclaim.BaseRequestRef(request)
	for i, c := range configs {
		if c.Opaque == nil || c.Opaque.Driver != driverName {
			continue
		}
		cfg, err := DecodeConfig(c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("config #%d (from %s): %w", i, c.Source, err)
		}
		if len(c.Requests) > 0 && !slices.Contains(c.Requests, request) && !slices.Contains(c.Requests, base) {
			continue
		}
		if c.Source == resourceapi.AllocationConfigSourceClass {
			fromClass = cfg
		} else {
			fromClaim = cfg
		}
	}
	switch {
	case fromClaim != nil:
		return fromClaim, nil
	case fromClass != nil:
		return fromClass, nil
	default:
		return DefaultConfig(), nil
	}
}
