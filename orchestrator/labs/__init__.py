"""The labs: the embedded one-machine lab (redis, controller, agents, loop DUTs) and the demo that runs on it."""
