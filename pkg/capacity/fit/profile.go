package fit

import (
	"fmt"
	"os"
	"slices"

	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/drasched/drasched/apis/config"
	"github.com/drasched/drasched/apis/config/scheme"
	"github.com/drasched/drasched/pkg/plugins/dra"
)

// DefaultProfile is the profile drasched's shipped configuration has.
const DefaultProfile = "drasched"

// ProfileArgs reads StructuredDRA's arguments from a
// KubeSchedulerConfiguration file, as kube-scheduler decodes it (defaults
// applied), for the profile of that scheduler name; "" takes the profile
// named drasched or, failing that, the only profile. Without a file, it
// returns the defaults. A profile without StructuredDRA pluginConfig gets
// the defaults, as in kube-scheduler.
func ProfileArgs(path, profile string) (*config.StructuredDRAArgs, error) {
	if path == "" {
		return scheme.DefaultArgs()
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg schedconfig.KubeSchedulerConfiguration
	if _, _, err := schedscheme.Codecs.UniversalDecoder().Decode(data, nil, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var names []string
	for _, p := range cfg.Profiles {
		names = append(names, p.SchedulerName)
	}
	i := slices.Index(names, profile)
	switch {
	case profile != "" && i < 0:
		return nil, fmt.Errorf("%s has no profile %s (it has %v)", path, profile, names)
	case profile == "" && slices.Contains(names, DefaultProfile):
		i = slices.Index(names, DefaultProfile)
	case profile == "" && len(names) == 1:
		i = 0
	case profile == "":
		return nil, fmt.Errorf("%s has profiles %v: name one with --profile", path, names)
	}
	for _, pc := range cfg.Profiles[i].PluginConfig {
		if pc.Name != dra.Name {
			continue
		}
		if args, ok := pc.Args.(*config.StructuredDRAArgs); ok {
			return args, nil
		}
	}
	return scheme.DefaultArgs()
}
