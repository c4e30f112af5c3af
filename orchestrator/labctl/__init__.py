"""labctl, the client: its command line (cli), the controller client, reports and exports on the terminal,
hosts over SSH (fleet), Prometheus targets. Never the controller daemon's own code."""
