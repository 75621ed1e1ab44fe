package docs

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configv1 "github.com/drasched/drasched/apis/config/v1"
)

// TestConfigurationFields: docs/configuration.md has a row for every field
// of StructuredDRAArgs (v1, by its JSON name, nested fields dotted) whose
// default column holds the default that SetDefaults_StructuredDRAArgs sets.
func TestConfigurationFields(t *testing.T) {
	data, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(data), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			continue
		}
		name := strings.TrimSpace(cells[1])
		if strings.HasPrefix(name, "`") && strings.HasSuffix(name, "`") {
			rows[strings.Trim(name, "`")] = cells[2:]
		}
	}
	args := &configv1.StructuredDRAArgs{}
	configv1.SetDefaults_StructuredDRAArgs(args)
	fields := map[string]reflect.Value{}
	leaves(reflect.ValueOf(args).Elem(), "", fields)
	if len(fields) == 0 {
		t.Fatal("no fields found")
	}
	for name, value := range fields {
		row, ok := rows[name]
		if !ok {
			t.Errorf("docs/configuration.md has no row for StructuredDRAArgs field %s", name)
			continue
		}
		for _, want := range defaultStrings(value) {
			if !strings.Contains(row[0], "`"+want+"`") {
				t.Errorf("docs/configuration.md, field %s: the default column %q lacks `%s`", name, strings.TrimSpace(row[0]), want)
			}
		}
	}
}

// leaves collects the fields of a struct by dotted JSON name, descending
// into nested argument structs but not into API types such as durations.
func leaves(v reflect.Value, prefix string, out map[string]reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous || name == "" || name == "-" {
			continue
		}
		fv := v.Field(i)
		if fv.Kind() == reflect.Pointer && !fv.IsNil() && fv.Elem().Kind() == reflect.Struct && fv.Type() != reflect.TypeFor[*metav1.Duration]() {
			leaves(fv.Elem(), prefix+name+".", out)
			continue
		}
		out[prefix+name] = fv
	}
}

// defaultStrings is how a defaulted value is written in the table: a
// duration as Go prints it, a string as it is, a list item by item.
func defaultStrings(v reflect.Value) []string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if d, ok := v.Interface().(metav1.Duration); ok {
		return []string{d.Duration.String()}
	}
	if v.Kind() == reflect.Slice {
		var items []string
		for i := range v.Len() {
			items = append(items, fmt.Sprint(v.Index(i).Interface()))
		}
		return items
	}
	return []string{fmt.Sprint(v.Interface())}
}
