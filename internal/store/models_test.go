package store_test

import (
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm/schema"

	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestModelsMatchSchema checks the gorm models against the tables that the
// schema files create on both engines: every field is a NOT NULL column of
// a type that holds it, and every column is a field, except the
// timestamps the models leave to the database on purpose.
func TestModelsMatchSchema(t *testing.T) {
	models := []struct {
		model   any
		dbOwned []string // columns the database fills; not in the model
	}{
		{&store.Product{}, []string{"created_at", "updated_at"}},
		{&store.Order{}, nil},
		{&store.CouponBatch{}, []string{"created_at", "updated_at"}},
		{&store.CouponGrab{}, nil},
	}
	// Column types that hold each field type. INT is 32 bits, so an int
	// field may only meet INT where the schema chose INT.
	holds := map[reflect.Type][]string{
		reflect.TypeFor[int64]():       {"bigint", "integer"},
		reflect.TypeFor[int]():         {"int", "integer"},
		reflect.TypeFor[string]():      {"varchar", "text"},
		reflect.TypeFor[time.Time]():   {"datetime", "text"},
		reflect.TypeFor[store.Stamp](): {"datetime", "text"},
		// The sale window's bounds: NULL is no bound.
		reflect.TypeFor[store.NullStamp](): {"datetime", "text"},
	}
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			gdb := store.Gorm(b.Open(t))
			for _, m := range models {
				s, err := schema.Parse(m.model, &sync.Map{}, gdb.NamingStrategy)
				if err != nil {
					t.Fatal(err)
				}
				cols, err := gdb.Migrator().ColumnTypes(m.model)
				if err != nil {
					t.Fatalf("%s: %v", s.Table, err)
				}
				columns := map[string]bool{}
				for _, c := range cols {
					columns[c.Name()] = true
					f := s.LookUpField(c.Name())
					if f == nil {
						if !slices.Contains(m.dbOwned, c.Name()) {
							t.Errorf("column %s.%s is in no field of the model", s.Table, c.Name())
						}
						continue
					}
					typ := strings.ToLower(c.DatabaseTypeName())
					if !slices.Contains(holds[f.FieldType], typ) {
						t.Errorf("%s.%s is %s in the schema; the model's %s field is a %s", s.Table, c.Name(), typ, f.Name, f.FieldType)
					}
					// SQLite's INTEGER PRIMARY KEY is the rowid: never NULL,
					// though not declared NOT NULL.
					if pk, _ := c.PrimaryKey(); pk {
						continue
					}
					if nullable, ok := c.Nullable(); f.FieldType == reflect.TypeFor[store.NullStamp]() {
						if !ok || !nullable {
							t.Errorf("%s.%s is NOT NULL (or cannot tell: %v); the model's %s field means no bound by NULL", s.Table, c.Name(), !ok, f.Name)
						}
						continue
					} else if !ok || nullable {
						t.Errorf("%s.%s may be NULL (or cannot tell: %v); the model's %s field cannot hold NULL", s.Table, c.Name(), !ok, f.Name)
					}
				}
				for _, f := range s.Fields {
					if !columns[f.DBName] {
						t.Errorf("the model's %s field has no column %s.%s", f.Name, s.Table, f.DBName)
					}
				}
			}
		})
	}
}
