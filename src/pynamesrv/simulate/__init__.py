"""``pynamesrv simulate``: a fleet of fake brokers and route-query clients against name servers.

No broker process exists: every broker is a ``BrokerClient`` with a made-up address
(``127.0.0.X:port``) that registers, heartbeats and unregisters exactly as a Java broker
does, so only the name-server side is exercised. Chaos (silent kills, graceful stops,
connection drops, flapping, one-sided partitions) is injected at seeded random moments, and
the route-query clients measure what matters to an application: how long after each event
they stop (and start again) seeing the broker in the routes of its topics, per name server.

Modules, in dependency order:

* ``scenario``  options, the fleet's shape (names, addresses, topics) and the chaos plan
* ``stats``     counters and latency samples, error classification
* ``detection`` chaos events and the watches that turn route answers into detection delays
* ``fleet``     one simulated broker: its registration loop and the chaos actions on it
* ``chaos``     runs the chaos plan: picks victims, acts, opens watches
* ``queries``   route-query clients (Zipf-ish topic choice plus probes of watched topics)
* ``progress``  the live view (rich Live on a terminal, plain lines otherwise)
* ``report``    the final summary as JSON-ready data and as tables
* ``runner``    wires it all onto one asyncio loop
"""

from pynamesrv.simulate.runner import run_simulation
from pynamesrv.simulate.scenario import PartitionSpec, SimConfig

__all__ = ["PartitionSpec", "SimConfig", "run_simulation"]
