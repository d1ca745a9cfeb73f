package config

import (
	"reflect"
	"strings"
)

// fieldsOf is the JSON names of wire struct T's fields, those of the
// structs it embeds included, as encoding/json writes them: the members
// the parser knows in the object T encodes. A field is declared once, by
// its tag; a member that is no field of T is an unknown field.
func fieldsOf[T any]() []string {
	return appendJSONNames(nil, reflect.TypeFor[T]())
}

func appendJSONNames(names []string, t reflect.Type) []string {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, tagged := f.Tag.Lookup("json")
		name, _, _ := strings.Cut(tag, ",")
		switch {
		case f.Anonymous && !tagged && f.Type.Kind() == reflect.Struct:
			names = appendJSONNames(names, f.Type)
		case name == "-" || !f.IsExported():
		case name == "":
			names = append(names, f.Name)
		default:
			names = append(names, name)
		}
	}
	return names
}
