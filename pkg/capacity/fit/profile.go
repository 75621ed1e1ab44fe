package fit

import (
	"fmt"
	"os"
	"slices"

	"github.com/drasched/drasched/apis/config"
	"github.com/drasched/drasched/apis/config/decode"
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
		return decode.DefaultArgs()
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	profiles, err := decode.Profiles(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var names []string
	for _, p := range profiles {
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
	return profiles[i].Args, nil
}
