// Package devenvtest starts the dev environment (test/devenv) for one e2e
// test: its logs in the test's directory, the operator's and klog's logger
// pointed there, stopped when the test ends and the logs' tails printed when
// it failed. It is the e2e tests' helper only: test/devenv, which `make dev`
// links too, must not import testing.
package devenvtest
