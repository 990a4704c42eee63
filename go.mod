module github.com/sluice-dev/sluice

go 1.26

require go.yaml.in/yaml/v3 v3.0.4 // indirect
