// composecheck loads a Compose file with compose-go, the library `docker compose` itself
// loads files with: schema validation against the Compose Specification, interpolation, path
// resolution and the cross-references between services. It prints the normalised project as
// JSON on success and the loader's error (exit 1) otherwise.
//
//	go run ./composecheck ../docker-compose.yml
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: composecheck COMPOSE_FILE")
		os.Exit(2)
	}
	options, err := cli.NewProjectOptions([]string{os.Args[1]}, cli.WithOsEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	project, err := options.LoadProject(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out, err := project.MarshalJSON()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
