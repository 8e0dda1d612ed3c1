"""Training: how a namespace's dictionary is chosen, and when and where it is retrained.

* `params`: a run's parameters and defaults, why it ran and what it decided (pure values).
* `split`: a sample's training part and held-out part, its newest slice (pure).
* `cost`: the encode cost model the CPU budget is judged on (pure).
* `choice`: sample → candidates → held-out evaluation → promote or reject → refit (pure).
* `schedule`: when a namespace's trainer trains: first, on schedule, on growth or on drift (pure).
* `sampling`: the bounded reservoir of raw values the relay and the proxy tap for training (pure).
* `promotion`: a promoted run's dictionary published, stored and activated (registry, store).
* `topic_sample`: a training sample read from a Kafka topic's newest records (Kafka side).
* `trainer`: training beside the relay or the proxy, each run in a child process (Kafka side).

Nothing is imported here: importing a pure module runs this package first, and must not load
the Kafka side with it.
"""
