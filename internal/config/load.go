package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// EnvConfig is the environment variable that names the configuration file
// when --config is not given.
const EnvConfig = "WRITEBACK_CONFIG"

// Load builds the configuration from, in order of precedence, the flags
// (only those set on the command line), the environment (WRITEBACK_<FLAG>),
// the YAML file and the defaults. The file is path, unless --config or
// WRITEBACK_CONFIG names another; with no file at all the defaults stand.
// lookupEnv is usually os.LookupEnv; nil means an empty environment, and
// flags may be nil. Load does not validate: call Validate.
func Load(path string, lookupEnv func(string) (string, bool), flags *pflag.FlagSet) (*Config, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	if f := lookupFlag(flags, flagConfig); f != nil && f.Changed {
		path = f.Value.String()
	} else if v, ok := lookupEnv(EnvConfig); ok && v != "" {
		path = v
	}

	cfg := Default()
	if path != "" {
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("config file %s does not exist; pass --config (or set %s) with the path of your configuration file", path, EnvConfig)
		}
		if err != nil {
			return nil, fmt.Errorf("config file %s cannot be read: %v", path, err)
		}
		if err := cfg.decode(path, data); err != nil {
			return nil, err
		}
	}
	for _, b := range bindings {
		if v, ok := lookupEnv(b.env()); ok && v != "" {
			if err := b.apply(cfg, v); err != nil {
				return nil, fmt.Errorf("%s: %v", b.env(), err)
			}
		}
		if f := lookupFlag(flags, b.name); f != nil && f.Changed {
			if err := b.apply(cfg, f.Value.String()); err != nil {
				return nil, fmt.Errorf("--%s: %v", b.name, err)
			}
		}
	}
	if err := cfg.resolveDSNEnv(lookupEnv); err != nil {
		return nil, err
	}
	cfg.fillDerived()
	return cfg, nil
}

// resolveDSNEnv fills each store's DSN (or MongoDB URI) from the
// environment variable its dsnEnv names, so that secrets stay out of the
// file. A dsn (or uri) written in the file wins over dsnEnv.
func (c *Config) resolveDSNEnv(lookupEnv func(string) (string, bool)) error {
	for _, name := range sortedKeys(c.Stores) {
		s := c.Stores[name]
		if s.DSNEnv == "" {
			continue
		}
		v, ok := lookupEnv(s.DSNEnv)
		if !ok || v == "" {
			return fmt.Errorf("stores.%s.dsnEnv: the environment variable %s is not set; set it to the store's DSN or remove dsnEnv", name, s.DSNEnv)
		}
		if s.Driver == DriverMongoDB {
			if s.URI == "" {
				s.URI = v
			}
		} else if s.DSN == "" {
			s.DSN = v
		}
		c.Stores[name] = s
	}
	return nil
}

// Parse builds a configuration from YAML on top of the defaults, without
// environment or flags; name labels the errors. Tests use it to build
// configurations inline. Parse does not validate: call Validate.
func Parse(name string, data []byte) (*Config, error) {
	cfg := Default()
	if err := cfg.decode(name, data); err != nil {
		return nil, err
	}
	cfg.fillDerived()
	return cfg, nil
}

func lookupFlag(fs *pflag.FlagSet, name string) *pflag.Flag {
	if fs == nil {
		return nil
	}
	return fs.Lookup(name)
}

// decode decodes the YAML document data onto c. The document is first
// checked node by node against the Config type, which names the offending
// key and line in one sentence; the strict decoder (KnownFields) then does
// the assignment and catches anything the check missed.
func (c *Config) decode(name string, data []byte) error {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return fmt.Errorf("config file %s is not valid YAML: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(root.Content) == 0 {
		return nil // empty file: the defaults stand
	}
	if err := checkNode(root.Content[0], reflect.TypeOf(*c), ""); err != nil {
		return fmt.Errorf("%s:%v", name, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		msg := err.Error()
		var te *yaml.TypeError
		if errors.As(err, &te) {
			msg = strings.Join(te.Errors, "; ")
		}
		return fmt.Errorf("config file %s: %s", name, strings.TrimPrefix(msg, "yaml: "))
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		return fmt.Errorf("config file %s holds more than one YAML document; keep only one (remove the extra ---)", name)
	}
	return nil
}

// lineError is a problem at one line of the file.
type lineError struct {
	line int
	msg  string
}

func (e *lineError) Error() string { return fmt.Sprintf("%d: %s", e.line, e.msg) }

func errAt(n *yaml.Node, format string, args ...any) error {
	return &lineError{line: n.Line, msg: fmt.Sprintf(format, args...)}
}

var (
	durationType = reflect.TypeOf(Duration{})
	byteSizeType = reflect.TypeOf(ByteSize(0))
)

// checkNode reports the first key in n, in file order, that the type t has
// no field for, and the first value that does not fit its field's type.
// path is the dotted path of n ("redis", "collections.usertable").
func checkNode(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	at := path
	if at == "" {
		at = "the top level"
	}
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			return errAt(n, "%s: want a duration such as 500ms, 2s or 1h", at)
		}
		if _, err := ParseDuration(n.Value); err != nil {
			return errAt(n, "%s: %v", at, err)
		}
		return nil
	case t == byteSizeType:
		if n.Kind != yaml.ScalarNode {
			return errAt(n, "%s: want a size such as 1GiB or 512MiB", at)
		}
		if _, err := ParseByteSize(n.Value); err != nil {
			return errAt(n, "%s: %v", at, err)
		}
		return nil
	}

	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return errAt(n, "%s: want a mapping of keys (%s)", at, strings.Join(yamlKeys(t), ", "))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" { // merge key: the merged mapping must fit t too
				if err := checkMerge(v, t, path); err != nil {
					return err
				}
				continue
			}
			f, ok := fieldByKey(t, k.Value)
			if !ok {
				where := "the top level"
				if path != "" {
					where = path
				}
				return errAt(k, "%s is not a known key; remove it or fix its spelling (%s takes: %s)",
					join(path, k.Value), where, strings.Join(yamlKeys(t), ", "))
			}
			if err := checkNode(v, f.Type, join(path, k.Value)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return errAt(n, "%s: want a mapping of names to entries", at)
		}
		if t.Elem().Kind() == reflect.Interface {
			return nil // kept raw
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" {
				if err := checkMerge(v, t, path); err != nil {
					return err
				}
				continue
			}
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" && t.Elem().Kind() == reflect.Struct {
				// yaml.v3 would make it a zero value, skipping its defaults
				return errAt(v, "%s: the entry is empty; fill it in (%s) or remove it",
					join(path, k.Value), strings.Join(yamlKeys(t.Elem()), ", "))
			}
			if err := checkNode(v, t.Elem(), join(path, k.Value)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return errAt(n, "%s: want a list such as [a, b]", at)
		}
		for i, e := range n.Content {
			if err := checkNode(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Interface:
		return nil
	}

	// A scalar field: let yaml.v3 say whether the value fits.
	if n.Kind != yaml.ScalarNode {
		return errAt(n, "%s: want a single value, not a list or a mapping", at)
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		want := "a " + t.Kind().String()
		switch t.Kind() {
		case reflect.Int, reflect.Int64, reflect.Int32:
			want = "a whole number"
		case reflect.Bool:
			want = "true or false"
		case reflect.String:
			want = "a string"
		}
		return errAt(n, "%s: %q is not %s", at, n.Value, want)
	}
	return nil
}

func checkMerge(v *yaml.Node, t reflect.Type, path string) error {
	if v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	if v.Kind == yaml.SequenceNode {
		for _, e := range v.Content {
			if err := checkNode(e, t, path); err != nil {
				return err
			}
		}
		return nil
	}
	return checkNode(v, t, path)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// fieldByKey finds the field of struct type t whose yaml tag is key.
func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if yamlName(f) == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// yamlKeys lists the keys struct type t accepts, sorted.
func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		if name := yamlName(t.Field(i)); name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	sort.Strings(keys)
	return keys
}

func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "" {
		return strings.ToLower(f.Name) // yaml.v3's default
	}
	return name
}
