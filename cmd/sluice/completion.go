package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newCompletionCmd: `sluice completion bash|zsh|fish` prints cobra's
// completion script for the shell. The scripts ask the binary itself
// (`sluice __complete ...`) what to complete, so they complete exactly the
// commands and flags it takes, -o's formats, file names where a flag takes
// a file, and entity names and client addresses from the running agent.
// deploy/pkg runs it to put the scripts in the packages.
func newCompletionCmd() *cobra.Command {
	shells := []string{"bash", "zsh", "fish"}
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "print a shell completion script (bash, zsh or fish), made from the command tree",
		Args:  exactArgs(1, "name one shell: bash, zsh or fish"),
		Annotations: annotations(nil, "sluice completion bash | sudo tee /usr/share/bash-completion/completions/sluice",
			"sluice completion fish > ~/.config/fish/completions/sluice.fish", "sluice completion zsh > \"${fpath[1]}/_sluice\""),
		ValidArgs: shells,
		RunE: func(c *cobra.Command, args []string) error {
			root, w := c.Root(), c.OutOrStdout()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(w, true)
			case "zsh":
				return root.GenZshCompletion(w)
			case "fish":
				return root.GenFishCompletion(w, true)
			}
			return usageError{fmt.Errorf("completion: %q is not a shell sluice completes for (bash, zsh, fish)", args[0])}
		},
	}
}
