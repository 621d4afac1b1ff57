"""The bus (busched.bus) over a real nats-server: apply, feeds, permissions, restarts, schemas, `busched up`."""
