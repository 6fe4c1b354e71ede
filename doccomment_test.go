package ferry_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestExportedNamesDocumented fails for an exported name of a library
// package that go doc would show without a comment: staticcheck checks a
// comment's first word, never that there is one. A type, const or var is
// covered by a comment on its own spec, or on a group of one spec (a
// group's comment titles a group of several; each needs its own).
func TestExportedNamesDocumented(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{".", "catchup", "ferryhttp", "ferrytest", "postgres", "prometheus", "provider", "sqlite", "storetest"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range undocumented(f) {
				t.Errorf("%s: exported %s has no doc comment", fset.Position(name.Pos()), name.Name)
			}
		}
	}
}

// undocumented returns the exported names of f that have no doc comment.
// Methods count only on exported receiver types, as go doc shows only those.
func undocumented(f *ast.File) []*ast.Ident {
	var missing []*ast.Ident
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() && d.Doc == nil && exportedReceiver(d.Recv) {
				missing = append(missing, d.Name)
			}
		case *ast.GenDecl:
			groupDoc := d.Doc != nil && len(d.Specs) == 1
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() && s.Doc == nil && !groupDoc {
						missing = append(missing, s.Name)
					}
				case *ast.ValueSpec:
					// A group's comment may title the names a line comment
					// each explains, as in an enum of constants.
					documented := s.Doc != nil || s.Comment != nil || d.Doc != nil
					for _, n := range s.Names {
						if n.IsExported() && !documented {
							missing = append(missing, n)
						}
					}
				}
			}
		}
	}
	return missing
}

func exportedReceiver(recv *ast.FieldList) bool {
	if recv == nil {
		return true
	}
	t := recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	switch g := t.(type) {
	case *ast.IndexExpr:
		t = g.X
	case *ast.IndexListExpr:
		t = g.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}
