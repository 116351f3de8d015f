"""The driver's owners, each set up in its own __init__: the run directory, the actor system (every role's
handles), the prompt feeder, the rollout fleet, the reward watch and the step reporter. rayrl.trainer's
loop is the asynchronous step over them; a custom loop (recipes/custom_loop.py) uses the actor system alone."""

from rayrl.driver.actor_system import ActorSystem
from rayrl.driver.ray_cluster import start_ray

__all__ = ["ActorSystem", "start_ray"]
