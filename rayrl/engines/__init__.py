"""Backends behind small Protocols, chosen by config string. Engines never import Ray."""
