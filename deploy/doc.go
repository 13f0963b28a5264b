// Package deploy holds what runs seckill as a fleet in containers: the nginx
// front (nginx.conf) and the tests of docker-compose.yml and the Dockerfile.
//
// Most tests need no Docker engine: the compose file is parsed with
// compose-go, the loader Docker Compose itself uses, and every app replica's
// environment is fed to config.Load, so a renamed SECKILL_ variable, a lost
// healthcheck or an nginx upstream that forgets a replica fails
// `go test ./deploy/` rather than `docker compose up` in front of a
// workshop. TestComposeSmoke (make compose-smoke) runs the fleet for real
// when asked to. The package has no code of its own.
package deploy
