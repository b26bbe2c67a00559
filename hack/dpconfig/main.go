// Command dpconfig reads NVIDIA k8s-device-plugin config files with the plugin's own loader
// (api/config/v1.NewConfig, as `nvidia-device-plugin --config-file` does at start) and prints what it read
// as one JSON line per file. A file the loader refuses ends the run: its error on stderr, exit status 1.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	cli "github.com/urfave/cli/v2"
)

func main() {
	flags := []cli.Flag{&cli.StringFlag{Name: "config-file"}}
	for _, path := range os.Args[1:] {
		app := &cli.App{
			Name:  "dpconfig",
			Flags: flags,
			Action: func(c *cli.Context) error {
				config, err := spec.NewConfig(c, flags)
				if err != nil {
					return err
				}
				return json.NewEncoder(os.Stdout).Encode(config)
			},
		}
		if err := app.Run([]string{"dpconfig", "--config-file", path}); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(1)
		}
	}
}
