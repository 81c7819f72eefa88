package main

import (
	"encoding/json"
	"testing"
)

// A command's --json prints no rows as [], never null: a script reads the
// list the same way whether or not anything matched.
func TestListedPrintsNoRowsAsAnEmptyList(t *testing.T) {
	t.Parallel()
	for name, rows := range map[string][]int64{"nil": nil, "empty": {}} {
		t.Run(name, func(t *testing.T) {
			b, err := json.Marshal(listed(rows))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != "[]" {
				t.Errorf("%s rows print as %s, want []", name, b)
			}
		})
	}
	b, err := json.Marshal(listed([]int64{1, 2}))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "[1,2]" {
		t.Errorf("rows 1, 2 print as %s, want [1,2]", b)
	}
}
