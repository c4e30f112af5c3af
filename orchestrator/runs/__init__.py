"""A run before it has results: a submission judged (:mod:`.submission`, the one set of checks labctl, the web
service and the controller all call) and the commands clients send the controller over the broker
(:mod:`.client`). Below the daemons and clients, above the store: nothing here imports labctl, the web service or
the controller."""
