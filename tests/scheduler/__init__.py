"""The scheduler (busched.scheduler) over a real nats-server: trust, bind states, pipeline, clocks, explain,
describe, metrics."""
