"""The beanstalk core: beanstalkd 1.12 semantics (jobs, tubes, sessions, timers)."""
