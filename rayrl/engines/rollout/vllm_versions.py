"""Which policy version made each token of the requests running in vLLM. At every weight update the tokens each
running completion holds so far are marked with the version before the update; when a completion finishes, its
per-token versions follow from its marks. vLLM streams only final outputs (FINAL_ONLY), so the marks are read
from its request bookkeeping at the update, not from a token stream: its running completions, the finished ones
of an n > 1 request whose others still run, and a finished request's output not yet taken by its caller (all of
whose tokens precede the update)."""

from __future__ import annotations


def token_versions(n_tokens: int, boundaries: list[tuple[int, int]], current: int) -> list[int]:
    """Per-token policy versions from (tokens generated before an update, version before it) marks."""
    versions, start = [], 0
    for count, version in boundaries:
        versions += [version] * (min(count, n_tokens) - start)
        start = max(start, min(count, n_tokens))
    return versions + [current] * (n_tokens - start)


class VersionMarks:
    def __init__(self) -> None:
        self.marks: dict[str, list[tuple[int, int, int]]] = {}  # request -> (completion index, tokens so far, version)
        self.finished = 0  # requests done so far (a pause waits until outputs stop arriving)
        self.untracked = 0  # completions seen at an update that we could not match to a request of ours
        self.collectors: dict[str, object] = {}  # request -> vLLM's output collector, once vLLM holds the request

    def open(self, rid: str) -> None:
        self.marks[rid] = []

    def attach(self, rid: str, collector) -> None:
        self.collectors[rid] = collector

    def close(self, rid: str) -> list[tuple[int, int, int]]:
        self.finished += 1
        self.collectors.pop(rid, None)
        return self.marks.pop(rid)

    def running(self) -> bool:
        return bool(self.marks)

    def in_flight(self, llm, unmatched: list | None = None, queued: dict[str, int] | None = None):
        """(our request id, completion index, tokens generated so far) per completion of our open requests, finished
        ones included; queued: tokens per vLLM request id that its engine sent but its output handler has not
        applied yet (queued_tokens)."""
        queued, parents = queued or {}, {}
        for state in list(llm.output_processor.request_states.values()):
            rid = getattr(state, "external_req_id", None) or state.request_id
            if rid not in self.marks:  # vLLM < 0.27 names a child of an n > 1 request "<index>_<id>"
                rid = rid.split("_", 1)[-1]
            if rid in self.marks:
                yield rid, state.request_index, state.detokenizer.num_output_tokens() + queued.get(state.request_id, 0)
                if state.parent_req is not None:
                    parents[rid] = state.parent_req
            elif unmatched is not None:
                unmatched.append(state.request_id)
        for rid, parent in parents.items():  # its finished completions wait there for the others (FINAL_ONLY)
            yield from ((rid, c.index, len(c.token_ids)) for c in parent.output_aggregator if c is not None)
        for rid, collector in list(self.collectors.items()):  # finished, the final output not yet taken
            if getattr(out := collector.output, "finished", False):
                yield from ((rid, c.index, len(c.token_ids)) for c in out.outputs)

    def tokens_in_flight(self, llm) -> int:
        return sum(n for _, _, n in self.in_flight(llm))

    def mark(self, llm, version: int, queued: dict[str, int] | None = None) -> None:
        """Tokens generated so far by each running request (queued ones included) were made by `version`."""
        unmatched: list[str] = []
        for rid, index, n in self.in_flight(llm, unmatched, queued):
            self.marks[rid].append((index, n, version))
        self.untracked += len(unmatched)  # such tokens would be tagged with the new version


def queued_tokens(llm) -> dict[str, int] | None:
    """Tokens per vLLM request id that the engine process has sent and the client's output handler has not applied
    yet (None where the client keeps no such queue). Once a pause has returned, the engine sends nothing more, so
    these and the applied ones are all the tokens made before it; nothing needs to drain before a weight update."""
    queue = getattr(getattr(llm, "engine_core", None), "outputs_queue", None)
    items = getattr(queue, "_queue", None)  # asyncio.Queue's deque: it has no public way to look inside
    if items is None:
        return None
    counts: dict[str, int] = {}
    for item in list(items):
        for out in getattr(item, "outputs", None) or ():  # an error put in the queue has no outputs
            counts[out.request_id] = counts.get(out.request_id, 0) + len(out.new_token_ids)
    return counts


def completion_versions(n_tokens: int, marks: list[tuple[int, int, int]], index: int, current: int) -> list[int]:
    """The versions of completion `index`'s tokens from its request's marks."""
    return token_versions(n_tokens, [(count, version) for i, count, version in marks if i == index], current)


async def final_output(llm, rid: str, prompt, params, lora_request, marks: VersionMarks):
    """vLLM's generate() for one FINAL_ONLY request, its output collector handed to the marks (a request that
    finishes just before an update, its output still waiting for this caller, is then marked as the old version's):
    the final output; the request is aborted in vLLM if this is cancelled or fails."""
    collector = None
    try:
        collector = await llm.add_request(rid, prompt, params, lora_request=lora_request)
        marks.attach(rid, collector)
        while not (out := collector.get_nowait() or await collector.get()).finished:
            pass
        return out
    except BaseException:
        if collector is not None and not llm.errored:
            await llm.abort(rid)
        raise
