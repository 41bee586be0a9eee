"""disq: a replicated task queue that speaks beanstalkd and Disque."""

__version__ = "0.1.0"
