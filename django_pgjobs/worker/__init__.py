"""``runjobs``'s worker, in parts a newcomer can find by name.

=================  ==============================================================================
``process.py``     one worker process: builds the parts, threads, signals, shutdown, exit codes
``options.py``     what it was asked to do (queues and their limits, slots, burst, max jobs)
``claimer.py``     the claim loop: promotion, claims sized to room (and ahead), burst/max-jobs ends
``inflight.py``    the jobs it holds, each in one explicit state
``executor.py``    runs one job and always returns an outcome that can be stored
``outcome.py``     that outcome, and the safe text it is made of
``acknowledger.py`` writes outcomes in batches, through outages, fenced
``heartbeat.py``   extends leases; abandons runs past their timeout
``listener.py``    LISTEN for wake-ups (and says so when a pooler makes it deaf)
``connections.py`` the worker's own bounded connections (timeouts, keepalives)
=================  ==============================================================================
"""

from .options import QueueSpec, WorkerOptions
from .process import Worker, default_worker_id, exit_process

__all__ = ["QueueSpec", "Worker", "WorkerOptions", "default_worker_id", "exit_process"]
