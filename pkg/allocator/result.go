package allocator

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
)

// buildResults turns the found assignment into one AllocationResult per
// claim, with upstream's device order, configs and node selector.
func (s *search) buildResults() ([]resourceapi.AllocationResult, error) {
	results := make([]resourceapi.AllocationResult, len(s.claims))
	// One backing array for the device results of all claims: Filter builds
	// results for every feasible node. Each claim's part is capped so that
	// appending to it cannot run into the next claim's.
	numDevices := 0
	for ci := range s.claims {
		numDevices += len(s.results[ci])
	}
	deviceResults := make([]resourceapi.DeviceRequestAllocationResult, numDevices)
	shareIDs, err := s.newShareIDs()
	if err != nil {
		return nil, err
	}
	for ci, cd := range s.claims {
		result := &results[ci]
		devices := s.results[ci]
		result.Devices.Results = deviceResults[:len(devices):len(devices)]
		deviceResults = deviceResults[len(devices):]
		for i, d := range devices {
			c := s.cands[d.cand]
			rd := d.nr.rd
			var consumed map[resourceapi.QualifiedName]resource.Quantity
			var shareID *types.UID
			if d.share != nil {
				// Share IDs are only made for the final result; which
				// random ID a share gets does not matter.
				shareID = &shareIDs[0]
				shareIDs = shareIDs[1:]
				if len(d.share.names) > 0 {
					consumed = d.share.consumed()
				}
			}
			out := resourceapi.DeviceRequestAllocationResult{
				Request:          rd.fullName,
				Driver:           c.id().Driver.String(),
				Pool:             c.id().Pool.String(),
				Device:           c.id().Device.String(),
				Tolerations:      rd.tolerations,
				ShareID:          shareID,
				ConsumedCapacity: consumed,
			}
			if rd.adminAccess {
				out.AdminAccess = ptr.To(true)
			}
			if s.a.tier.honorsSkipNodeOperations {
				minor.SetResultSkipNodeOperations(&out, minor.SkipNodeOperations(&c.ps.slice.Spec))
			}
			if s.a.features.DeviceBindingAndStatus {
				out.BindingConditions = c.device().BindingConditions
				out.BindingFailureConditions = c.device().BindingFailureConditions
			}
			result.Devices.Results[i] = out
		}
		result.Devices.Config = s.configs(ci, cd)

		selector, err := s.nodeSelector(devices)
		if err != nil {
			return nil, fmt.Errorf("create NodeSelector for claim %s: %w", cd.claim.Name, err)
		}
		result.NodeSelector = selector
	}
	return results, nil
}

// newShareIDs returns a new share ID for each share in the assignment:
// random (version 4) UUIDs from crypto/rand, as upstream's uuid.NewUUID
// makes them. Filter builds results for every node that fits, and a read of
// the operating system's random source per share was a tenth of the time of
// a node with shared devices; here the random bytes come from a buffer
// (randomBuffers), and the IDs of one result share one string.
func (s *search) newShareIDs() ([]types.UID, error) {
	n := 0
	for ci := range s.claims {
		for _, d := range s.results[ci] {
			if d.share != nil {
				n++
			}
		}
	}
	if n == 0 {
		return nil, nil
	}
	random := randomBuffers.Get().(*randomBuffer)
	defer randomBuffers.Put(random)
	const uuidLen = 36
	var text strings.Builder
	text.Grow(uuidLen * n)
	var buf [uuidLen]byte
	var u [16]byte
	for range n {
		if err := random.read(u[:]); err != nil {
			return nil, fmt.Errorf("generate share IDs: %w", err)
		}
		u[6] = u[6]&0x0f | 0x40 // version 4
		u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
		hex.Encode(buf[0:8], u[0:4])
		buf[8] = '-'
		hex.Encode(buf[9:13], u[4:6])
		buf[13] = '-'
		hex.Encode(buf[14:18], u[6:8])
		buf[18] = '-'
		hex.Encode(buf[19:23], u[8:10])
		buf[23] = '-'
		hex.Encode(buf[24:36], u[10:16])
		text.Write(buf[:])
	}
	all := text.String()
	ids := make([]types.UID, n)
	for k := range ids {
		ids[k] = types.UID(all[uuidLen*k : uuidLen*(k+1)])
	}
	return ids, nil
}

// randomBuffers hold bytes read from crypto/rand for share IDs, so that
// the operating system is asked once per few hundred IDs rather than once
// per node. A pool keeps concurrent Allocate calls off a shared lock; bytes
// are handed out once and never again.
var randomBuffers = sync.Pool{New: func() any { return &randomBuffer{next: randomBufferSize} }}

const randomBufferSize = 4096

type randomBuffer struct {
	bytes [randomBufferSize]byte
	// next is the first byte not handed out yet.
	next int
}

// read fills p with bytes from crypto/rand.
func (b *randomBuffer) read(p []byte) error {
	for len(p) > 0 {
		if b.next == randomBufferSize {
			if _, err := rand.Read(b.bytes[:]); err != nil {
				return err
			}
			b.next = 0
		}
		n := copy(p, b.bytes[b.next:])
		b.next += n
		p = p[n:]
	}
	return nil
}

// selected returns the (sub)request chosen for a request of a claim.
func (s *search) selected(ci, ri int) *requestData {
	return s.claims[ci].requests[ri].alternatives[s.selectedSub[ci][ri]]
}

// configs collects the configuration for the allocated devices: each class
// config once, for all requests using the class, then the claim's configs
// that apply to an allocated request; a config that covers every request
// gets an empty request list, which means "all".
func (s *search) configs(ci int, cd *claimData) []resourceapi.DeviceAllocationConfiguration {
	claim := cd.claim
	var configs []resourceapi.DeviceAllocationConfiguration
	type span struct{ start, end int }
	classSpans := make(map[string]span)
	for ri := range claim.Spec.Devices.Requests {
		rd := s.selected(ci, ri)
		class := rd.class
		if class == nil {
			continue
		}
		if sp, ok := classSpans[class.Name]; ok {
			for i := sp.start; i < sp.end; i++ {
				configs[i].Requests = append(configs[i].Requests, rd.fullName)
			}
			continue
		}
		start := len(configs)
		for _, config := range class.Spec.Config {
			configs = append(configs, resourceapi.DeviceAllocationConfiguration{
				Source:              resourceapi.AllocationConfigSourceClass,
				Requests:            []string{rd.fullName},
				DeviceConfiguration: config.DeviceConfiguration,
			})
		}
		classSpans[class.Name] = span{start, len(configs)}
	}

	// The name a request is known by in config request lists, besides its
	// own: "request/subrequest" for the chosen subrequest.
	subName := func(ri int) string {
		if !cd.requests[ri].hasSubRequests {
			return ""
		}
		return s.selected(ci, ri).fullName
	}
	for _, config := range claim.Spec.Devices.Config {
		// How often the config is listed: once if it applies, or in a minor
		// whose upstream lists it once per request it names, that often.
		times := 0
		if len(config.Requests) == 0 {
			times = 1
		}
		for ri := range claim.Spec.Devices.Requests {
			if times > 0 && !minor.ClaimConfigOncePerRequest {
				break
			}
			name := claim.Spec.Devices.Requests[ri].Name
			if len(config.Requests) > 0 && (slices.Contains(config.Requests, name) ||
				(subName(ri) != "" && slices.Contains(config.Requests, subName(ri)))) {
				times++
			}
		}
		for range times {
			configs = append(configs, resourceapi.DeviceAllocationConfiguration{
				Source:              resourceapi.AllocationConfigSourceClaim,
				Requests:            config.Requests,
				DeviceConfiguration: config.DeviceConfiguration,
			})
		}
	}
	if !minor.ConfigForAllHasNoRequests {
		return configs
	}

	for i := range configs {
		requests := configs[i].Requests
		if len(requests) == 0 {
			continue
		}
		all := true
		for ri := range claim.Spec.Devices.Requests {
			name := claim.Spec.Devices.Requests[ri].Name
			if slices.Contains(requests, name) || (subName(ri) != "" && slices.Contains(requests, subName(ri))) {
				continue
			}
			all = false
			break
		}
		if all {
			configs[i].Requests = nil
		}
	}
	return configs
}

// nodeSelector restricts a claim's allocation to where its devices are
// reachable: to the node itself if any device is local to it or binds to it,
// otherwise to the intersection of the slices' node selectors, or nowhere in
// particular (nil).
func (s *search) nodeSelector(devices []resultDevice) (*v1.NodeSelector, error) {
	term := v1.NodeSelectorTerm{}
	for _, d := range devices {
		c := s.cands[d.cand]
		device := c.device()
		var nodeName *string
		var selector *v1.NodeSelector
		if c.ps.perDeviceNodeSelection {
			nodeName, selector = device.NodeName, device.NodeSelector
		} else {
			nodeName, selector = c.ps.slice.Spec.NodeName, c.ps.slice.Spec.NodeSelector
		}
		if nodeName != nil || ptr.Deref(device.BindsToNode, false) {
			return nodeNameSelector(s.node.Name), nil
		}
		if selector == nil {
			continue
		}
		switch len(selector.NodeSelectorTerms) {
		case 0:
		case 1:
			term.MatchFields = addRequirements(term.MatchFields, selector.NodeSelectorTerms[0].MatchFields)
			term.MatchExpressions = addRequirements(term.MatchExpressions, selector.NodeSelectorTerms[0].MatchExpressions)
		default:
			// API validation prevents this.
			return nil, fmt.Errorf("unsupported ResourceSlice.NodeSelector with %d terms", len(selector.NodeSelectorTerms))
		}
	}
	if len(term.MatchFields) == 0 && len(term.MatchExpressions) == 0 {
		return nil, nil
	}
	return &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{term}}, nil
}

// nodeNameSelector returns a selector for the node with the given name:
// metadata.name In [name]. Filter builds one for every feasible node of
// every pod, so its parts share one allocation; each call returns a
// selector of its own.
func nodeNameSelector(name string) *v1.NodeSelector {
	parts := &struct {
		selector     v1.NodeSelector
		terms        [1]v1.NodeSelectorTerm
		requirements [1]v1.NodeSelectorRequirement
		values       [1]string
	}{}
	parts.values[0] = name
	parts.requirements[0] = v1.NodeSelectorRequirement{
		Key:      "metadata.name",
		Operator: v1.NodeSelectorOpIn,
		Values:   parts.values[:],
	}
	parts.terms[0].MatchFields = parts.requirements[:]
	parts.selector.NodeSelectorTerms = parts.terms[:]
	return &parts.selector
}

// addRequirements appends the requirements not present yet; two
// requirements are the same if key, operator and the set of values agree.
func addRequirements(to, from []v1.NodeSelectorRequirement) []v1.NodeSelectorRequirement {
	for _, requirement := range from {
		values := sets.New(requirement.Values...)
		present := slices.ContainsFunc(to, func(existing v1.NodeSelectorRequirement) bool {
			return existing.Key == requirement.Key && existing.Operator == requirement.Operator && sets.New(existing.Values...).Equal(values)
		})
		if !present {
			to = append(to, requirement)
		}
	}
	return to
}
