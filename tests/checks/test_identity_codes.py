"""Identity codes: what the layout, conformance and numerics checkers rely on when one run of
each world serves them all."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from fsdp_verify.checks.identity import INT_VIEW, IdentityCodes, gather_codes, gather_counter, gather_period, scatter_codes
from fsdp_verify.strategies import cases

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_codes_are_distinct_finite_signed_and_below_one_and_decode_to_their_counter(dtype):
    period = gather_period(dtype)
    assert period >= 14336
    counters = torch.arange(min(period, 1 << 16), dtype=torch.int64)
    codes = gather_codes(counters, dtype)
    bits = codes.view(INT_VIEW[dtype.itemsize]).tolist()
    assert len(set(bits)) == len(bits)  # layout can tell every element apart
    assert bool(codes.isfinite().all()) and bool((codes != 0).all()) and bool((codes.abs() < 1).all())
    assert 0.4 < float((codes > 0).double().mean()) < 0.6  # both signs, like the inputs
    assert all(gather_counter(b, dtype) == i for i, b in enumerate(bits[:4096]))
    wrapped = torch.tensor([period - 1, period, period + 7], dtype=torch.int64)
    assert [gather_counter(b, dtype) for b in gather_codes(wrapped, dtype).view(INT_VIEW[dtype.itemsize]).tolist()] \
        == [period - 1, 0, 7]


@pytest.mark.parametrize("dtype", (torch.int8, torch.uint8, torch.int32))
def test_integer_gather_codes_are_distinct_values_of_the_type_and_decode_to_their_counter(dtype):
    period = gather_period(dtype)
    assert period == 1 << (8 * dtype.itemsize)
    counters = torch.arange(min(period, 1 << 16), dtype=torch.int64)
    codes = gather_codes(counters, dtype)
    assert codes.dtype == dtype and len(set(codes.tolist())) == len(codes)
    assert all(gather_counter(b, dtype) == i for i, b in enumerate(codes.tolist()[:4096]))
    if dtype == torch.int32:  # most codes lie past what a half precision or float32 holds exactly
        assert float((codes.to(torch.int64).abs() > 1 << 24).double().mean()) > 0.9


def test_a_cast_the_parameter_cannot_hold_is_coded_at_the_cast():
    """An int32 cast of a float32 parameter: float32 holds integers up to 2**24 only, so codes at
    the parameter would reach the gather as the cast of float codes (zeros); the cast is coded."""
    from torch import fx as torch_fx
    from fsdp_verify.graph.builder import HEADER_KEY
    from fsdp_verify.graph.spec import ParamSpec
    graph = torch_fx.Graph()
    p = graph.placeholder("p")
    cast = graph.call_function(torch.ops.prims.convert_element_type.default, (p, torch.int32))
    gather = graph.call_function(torch.ops._c10d_functional.all_gather_into_tensor.default, (cast, 2, "fsdp"))
    gather.meta.update(comm_type="fsdp_all_gather", param_name="w")
    graph.output(gather)
    module = torch_fx.GraphModule(torch.nn.Module(), graph)
    module.meta[HEADER_KEY] = {"params": [ParamSpec("w", "p", (4,), "float32", "cpu", 0, "fsdp")]}
    codes = IdentityCodes.of(module)
    assert set(codes.sources) == {cast.name} and not codes.cast
    module.meta[HEADER_KEY]["params"][0] = ParamSpec("w", "p", (4,), "float64", "cpu", 0, "fsdp")
    assert IdentityCodes.of(module).cast == {"p": torch.int32}  # float64 holds every int32


def test_a_value_that_is_no_gather_code_decodes_to_nothing():
    assert gather_counter(torch.tensor(3.0).view(torch.int32).item(), torch.float32) is None


@pytest.mark.parametrize("dtype,degree", list(itertools.product(DTYPES, (2, 3, 5, 8))))
def test_scatter_codes_sum_exactly_in_any_rank_order(dtype, degree):
    generator = torch.Generator().manual_seed(degree)
    per_rank = [scatter_codes(torch.randint(0, 1 << 40, (512,), generator=generator), dtype, degree)
                for _ in range(degree)]
    assert all(bool(((c > 0) & (c <= 1)).all()) for c in per_rank)
    exact = sum(c.double() for c in per_rank)
    for order in (range(degree), reversed(range(degree))):
        total = torch.zeros(512, dtype=dtype)
        for rank in order:
            total = total + per_rank[rank]
        assert torch.equal(total.double(), exact)


def test_scatter_codes_of_power_of_two_shards_differ_between_params_and_ranks():
    # counter ranges start one shard apart; a power-of-two span would give every shard one sequence
    from fsdp_verify.checks.identity import IdentityCodes
    codes = IdentityCodes({"g0": ("w0", "fsdp_reduce_scatter", 2), "g1": ("w1", "fsdp_reduce_scatter", 2)})
    made = [codes.value(rank, _Named(name), torch.zeros(4, 16, dtype=torch.bfloat16))
            for name in ("g0", "g1") for rank in (0, 1)]
    assert len({tuple(t.view(torch.int16).reshape(-1).tolist()) for t in made}) == 4


def test_codes_keep_a_strided_source_strides():
    from fsdp_verify.checks.identity import IdentityCodes
    codes = IdentityCodes({"s": ("w", "fsdp_all_gather", 2)})
    natural = torch.zeros(4, 6).t()
    coded = codes.value(0, _Named("s"), natural)
    assert coded.stride() == natural.stride() and not coded.is_contiguous()
    with pytest.raises(RuntimeError):
        coded.view(-1)  # as the source itself would fail


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


def _view_source_case(barrier: bool):
    """A reduce-scatter whose source is a view of a gradient that an untagged free may release."""
    from fsdp_verify.model.case import Case
    from fsdp_verify.graph.compose import Composer
    c = Composer({"fsdp": (0, 1)})
    c.param("w", (2, 4), state_idx=0, device="cpu")
    x = c.input("x", (4, 4), "float32")
    grad = c.call("aten.mul.Tensor", x, 2.0)
    source = c.call("aten.view.default", grad, [4, 4])
    _, wait = c.reduce_scatter(source, "w")
    if barrier:
        c.free(grad, tagged=False)
    return Case(c.finish([wait]))


@pytest.mark.parametrize("barrier", [False, True])
def test_numerics_compares_plain_runs_only_where_a_coded_source_shares_storage_something_may_free(barrier):
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.targets import get_target
    findings, ctx = check_all(get_target("reference"), _view_source_case(barrier))
    assert findings == []
    runs = ctx.metrics["numerics"]["runs"]
    assert runs == ("plain: sources sharing storage: view" if barrier else "shared")


@pytest.mark.parametrize("kind,degree", [("fsdp_all_gather", 0), ("fsdp_reduce_scatter", 3)])
def test_shared_code_tables_give_the_directly_computed_codes(kind, degree, monkeypatch):
    # Codes come from a table shared by every case (grown by doubling, direct past its limit):
    # each slice must be exactly what coding the counters directly gives, and never handed out.
    from fsdp_verify.checks import identity
    monkeypatch.setattr(identity, "_TABLES", {})
    monkeypatch.setattr(identity, "_TABLE_LIMIT", 1 << 14)

    def direct(base, count):
        counters = torch.arange(base, base + count, dtype=torch.int64)
        return scatter_codes(counters, torch.bfloat16, degree) if kind == "fsdp_reduce_scatter" \
            else gather_codes(counters, torch.bfloat16)

    for base, count in ((1, 10), (4000, 300), (9000, 5000), (16000, 1000), (1, 1)):  # grows, then past the limit
        got = identity._codes(kind, torch.bfloat16, degree, base, count)
        assert torch.equal(got.view(torch.int16), direct(base, count).view(torch.int16))
    assert max(t.numel() for t in identity._TABLES.values()) == 1 << 14
    codes = identity.IdentityCodes({"src": ("p", kind, degree or 1)})
    node = type("N", (), {"name": "src"})()
    made = codes.value(0, node, torch.zeros(2, 3, dtype=torch.bfloat16))
    made.fill_(7)  # the run may write to a source's codes
    again = identity.IdentityCodes({"src": ("p", kind, degree or 1)}).value(0, node, torch.zeros(2, 3, dtype=torch.bfloat16))
    assert not torch.equal(again, made) and torch.equal(again.reshape(-1).view(torch.int16),
                                                        direct(1, 6).view(torch.int16))


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases("default", modules=True))
def test_exposed_sources_are_those_an_effect_reaches_other_than_through_the_source(case):
    # ``exposed`` walks each storage root's alias class once and remembers it (``touched``):
    # on every node of the originals and the reference's rewrites it must say what the rule
    # says, walked afresh for the node alone.
    from fsdp_verify.checks.graph_facts import alias_class, has_effect, view_closure
    from fsdp_verify.checks.identity import exposed
    from fsdp_verify.execute.world import build_world
    from fsdp_verify.targets import get_target

    def rule(node):
        own = {node, *view_closure(node)[0]}
        return has_effect(node) or any(has_effect(user) for other in alias_class(node) if other not in own
                                       for user in other.users)

    def agree(modules):
        for module in {id(m): m for m in modules.values()}.values():
            touched: dict = {}
            assert [exposed(n, touched) for n in module.graph.nodes] == [rule(n) for n in module.graph.nodes]

    modules = build_world(case)
    agree(modules)
    try:
        get_target("reference").rewrite(case, modules)
    except ValueError:
        return  # a refused case has its originals only
    agree(modules)


def _sent(run, module, rank: int) -> dict[str, torch.Tensor]:
    """What each tagged launch of ``module`` sends on ``rank`` in an identity run (flattened)."""
    from fsdp_verify.checks.graph_facts import FSDP_KINDS
    found = {}
    for node in module.graph.nodes:
        if node.meta.get("comm_type") in FSDP_KINDS and node.op == "call_function":
            sent = run.inputs.get((rank, node.name))
            if sent and isinstance(sent[0], torch.Tensor):
                found[node.name] = (node.meta["comm_type"], sent[0].reshape(-1))
    return found


def _coded(run, module, rank: int, launch: str) -> bool:
    """Whether everything ``launch`` sends came from coded sources (a fused launch: all its members')."""
    from fsdp_verify.checks.graph_facts import by_name
    coded = {name for (r, name) in run.sources if r == rank}
    chain, seen, total = [by_name(module)[launch].args[0]], set(), 0
    while chain:
        item = chain.pop()
        if not isinstance(item, torch.fx.Node) or item in seen:
            continue
        seen.add(item)
        if item.name in coded:
            total += run.sources[(rank, item.name)].numel()
        else:
            chain.extend(item.all_input_nodes)
    return 0 < total == run.inputs[(rank, launch)][0].numel()


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(cases("tiny"))
def test_every_element_a_collective_moves_carries_its_own_code(case):
    """The identity property the layout, conformance and numerics verdicts rest on: within what one
    tagged launch sends (a fused one included), on originals and rewrites, no two elements share a
    code (bit pattern), as long as the dtype's exact span holds them (reduce-scatter codes wrap)."""
    from fsdp_verify.checks.findings import CheckContext
    from fsdp_verify.checks.identity import _EXACT_INT
    from fsdp_verify.engine.run_case import run_target
    from fsdp_verify.targets import get_target
    run = run_target(get_target("reference"), case)
    if run.error is not None or not run.rewritten:
        return
    ctx = CheckContext(run, get_target("reference"))
    for modules, ran in ((ctx.original, ctx.original_run), (ctx.rewritten, ctx.rewritten_run)):
        if isinstance(ran, Exception):
            continue
        for rank, module in modules.items():
            for launch, (kind, sent) in _sent(ran, module, rank).items():
                if sent.dtype not in DTYPES or not _coded(ran, module, rank, launch):
                    continue
                if kind == "fsdp_reduce_scatter" and sent.numel() > (_EXACT_INT[sent.dtype] - 1) // 8:
                    continue  # codes wrap past the exact span of a sum over up to 8 ranks
                bits = sent.view(INT_VIEW[sent.element_size()]).tolist()
                assert len(set(bits)) == len(bits), (f"rank {rank}: {launch} ({kind}) sends "
                                                     f"{len(bits) - len(set(bits))} repeated codes")


def test_member_major_packing_of_equal_size_members_is_seen_by_layout():
    """Two members of equal element count (2x3 and 3x2): with one code range per parameter, the
    gradient's range overlapped the next parameter's and a member-major reduce-scatter moved codes
    that looked right."""
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.model.case import Case
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    from fsdp_verify.targets import get_target
    from fsdp_verify.targets.mutants import MUTANTS
    case = Case(render(Blueprint(blocks=((ParamDraw((2, 3), view="flat"), ParamDraw((3, 2), view="flat")),))))
    findings, _ = check_all(MUTANTS["rs_packed_member_major"], case)
    assert ("layout", "element_misplaced") in {f.key for f in findings}
    # the sums are named by parameter and element, not by their values ("received value 9.5e-07")
    misplaced = next(f for f in findings if f.key == ("layout", "element_misplaced"))
    assert "received blocks.0.w0's element 6 (average over 2 ranks)" in misplaced.message
    assert "original delivers blocks.0.w1's element 0 (average over 2 ranks)" in misplaced.message
    clean, _ = check_all(get_target("reference"), case)
    assert not [f for f in clean if f.severity == "error"]


def test_a_layout_verdict_says_whether_it_is_a_proof_or_only_a_test():
    """Distinct codes prove the data movement for every input; a bfloat16 reduce-scatter source past
    its exact span repeats codes and gets a second coded run, which tells its elements apart up to
    the span squared; past that the case counts as tested only (docs/proofs.md)."""
    from fsdp_verify.checks.identity import capacity
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.model.case import Case
    from fsdp_verify.report.tally import proofs_of
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    from fsdp_verify.targets import get_target
    assert capacity("fsdp_reduce_scatter", torch.bfloat16, 2) == 127
    small = Case(render(Blueprint(blocks=((ParamDraw((2, 3)), ParamDraw((3, 2))),))))
    large = Case(render(Blueprint(blocks=((ParamDraw((16, 16), dtype="bfloat16"), ParamDraw((3, 2))),))))
    huge = Case(render(Blueprint(blocks=((ParamDraw((96, 96), dtype="bfloat16"), ParamDraw((3, 2))),))))
    for case, kind in ((small, "layout_proved"), (large, "layout_two_runs"), (huge, "layout_tested")):
        findings, ctx = check_all(get_target("reference"), case)
        assert not [f for f in findings if f.severity == "error"]
        assert ctx.metrics["layout"]["proved"] is (kind == "layout_proved")
        assert ctx.metrics["layout"]["runs"] == (1 if kind == "layout_proved" else 2)
        assert proofs_of(ctx.metrics)[kind] == 1, kind


def test_a_folded_pre_gather_cast_raises_no_layout_finding():
    # mixed precision: fp32 shards cast to bf16 before each gather; inductor's all-gather bucketing
    # folds the casts into its copy-in and reads the placeholders (the shape a captured bf16 model
    # showed): codes at the cast's output would never reach the bucket, a false layout alarm
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.engine.triage import MISMATCH, classify
    from fsdp_verify.graph.compose import Composer
    from fsdp_verify.model.case import Case
    from fsdp_verify.targets import get_target
    c = Composer({"fsdp": (0, 1)}, overload="default")
    x = c.input("x", (2, 4), "bfloat16")
    outs = []
    for i in range(2):
        c.param(f"w{i}", (2, 4), state_idx=i, device="cpu", dtype="float32")
        low = c.call("aten._to_copy.default", c.param_spec(f"w{i}").placeholder, dtype=torch.bfloat16)
        _, w = c.all_gather(f"w{i}", source=low)
        outs.append(c.call("aten.mm.default", x, c.call("aten.t.default", w)))
    target = get_target("torch-inductor:custom_ops")
    case = Case(c.finish(outs, attrs={"captured_phase": "forward"}),  # the captured shape the excuse is for
                target_options=(("bucket_all_gathers_fx", "all"), ("bucket_reduce_scatters_fx", "none")))
    findings, _ = check_all(target, case)
    errors = [f for f in findings if f.severity == "error"]
    assert not [f for f in errors if f.checker in ("layout", "numerics")], [f.message for f in errors]
    assert {f.key for f in errors} <= {("dependencies", "node_lost")}  # the folded casts, nothing else
    if errors:
        kind, _ = classify(target, case, tuple(sorted({f.checker for f in errors})), errors)
        assert kind == MISMATCH


def test_codes_planted_at_a_parameter_survive_its_narrowing_cast():
    from torch import fx as torch_fx
    graph = torch_fx.Graph()
    p = graph.placeholder("p")
    cast = graph.call_function(torch.ops.aten._to_copy.default, (p,), {"dtype": torch.bfloat16})
    gather = graph.call_function(torch.ops._c10d_functional.all_gather_into_tensor.default, (cast, 2, "fsdp"))
    gather.meta.update(comm_type="fsdp_all_gather", param_name="w")
    graph.output(gather)
    codes = IdentityCodes.of(torch_fx.GraphModule(torch.nn.Module(), graph))
    assert set(codes.sources) == {"p"} and codes.cast == {"p": torch.bfloat16}
    held = codes.value(0, p, torch.zeros(64, dtype=torch.float32))
    narrowed = held.to(torch.bfloat16)
    assert torch.equal(narrowed.to(torch.float32), held)  # exact: the cast keeps every code
    assert codes.decode(narrowed, 5) == "w (rank 0, element 5)"


def test_a_misplacement_by_the_code_period_is_caught_by_the_second_coded_run_alone():
    """Codes of a bfloat16 reduce-scatter repeat every span; a copy-out that swaps elements one span
    apart moves equal codes in the shared run, and only the second run's other digit tells."""
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.model.case import Case
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    from fsdp_verify.targets import get_target
    case = Case(render(Blueprint(blocks=((ParamDraw((16, 16), dtype="bfloat16"),
                                          ParamDraw((3, 2), dtype="bfloat16")),))))
    findings, ctx = check_all(get_target("mutant:rs_swaps_at_code_span"), case)
    errors = [f for f in findings if f.severity == "error"]
    assert [(f.checker, f.rule) for f in errors] == [("layout", "element_misplaced")]
    assert errors[0].details["coded_run"] == 2 and ctx.metrics["layout"]["runs"] == 2


def test_a_dedup_that_reassociates_an_hsdp_sum_moves_no_bit_one_that_drops_a_gradient_does():
    # HSDP: a tied weight's two gradients are each all-reduced over the replicas, reduce-scattered
    # over the shard group and summed; inductor's dedup scatters their sum instead. The reduce-
    # scatter's input is the all-reduce's result, so it carries no codes of its own: with natural
    # values the reassociated sum differed in the last bit (a captured campaign's false alarm).
    # Codes at the all-reduce's source keep the sum exact, and a lost gradient still shows.
    from fsdp_verify.capture import Layer, ModelDesc, capture
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.model.case import Case
    from fsdp_verify.targets import get_target
    model = ModelDesc((Layer("linear", 8, checkpoint=True), Layer("linear", 8, tie=0, checkpoint=True)), mesh=(2, 2))
    inductor = get_target("torch-inductor")
    case = inductor.normalise(Case(capture(model).backward))
    assert any(n.meta.get("comm_type") == "dp_all_reduce" for n in case.graph.nodes)

    def errors(name: str) -> set:
        findings, _ = check_all(get_target(f"fx-pass:helpers.torch_passes:{name}"), case)
        return {f.key for f in findings if f.severity == "error"}
    # the add goes and the shard group's volume falls (what the dedup excuse names); no value moves
    assert errors("dedups_sums") == {("dependencies", "node_lost"), ("consistency", "volume_changed")}
    wrong = errors("dedups_one_addend_twice")
    assert ("numerics", "output_differs") in wrong and ("layout", "element_misplaced") in wrong


def test_every_element_an_hsdp_all_reduce_sends_carries_its_own_exact_code():
    """HSDP's all-reduces over the replicas are coded sources too: on the original and on inductor's
    rewrite with the all-reduces bucketed, each sends codes that are distinct per element and exact
    integers over a power of two (so any order of summing them gives the same bits)."""
    from fsdp_verify.capture import Layer, ModelDesc, capture
    from fsdp_verify.checks.findings import CheckContext
    from fsdp_verify.engine.run_case import run_target
    from fsdp_verify.model.case import Case
    from fsdp_verify.targets import get_target
    options = {"bucket_all_reduces_fx": "all", "bucket_reduce_scatters_fx": "none", "bucket_all_gathers_fx": "none"}
    target = get_target("torch-inductor").configure(options)
    model = ModelDesc((Layer("linear", 8), Layer("linear", 6)), mesh=(2, 2))
    case = Case(target.normalise(Case(capture(model).backward)).graph, target_options=tuple(sorted(options.items())))
    run = run_target(target, case)
    assert run.error is None
    ctx = CheckContext(run, target)
    checked = 0
    for modules, ran in ((ctx.original, ctx.original_run), (ctx.rewritten, ctx.rewritten_run)):
        assert not isinstance(ran, Exception)
        for rank, module in modules.items():
            for node in module.graph.nodes:
                if "all_reduce" not in str(node.target) or (rank, node.name) not in ran.inputs:
                    continue
                sent = ran.inputs[(rank, node.name)][0].reshape(-1)
                bits = sent.view(INT_VIEW[sent.element_size()]).tolist()
                assert len(set(bits)) == len(bits), f"rank {rank}: {node.name} sends repeated codes"
                scaled = sent.double() * 2 ** 24
                assert torch.equal(scaled, scaled.round()) and bool((sent > 0).all())
                checked += 1
    assert checked >= 4  # every rank's all-reduces, before and after bucketing


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn])
def test_a_negated_code_decodes_as_negated_not_as_the_element_the_original_delivers(dtype):
    # A pass that negated a gathered result read "received w (rank 0, element 3) where the original
    # delivers w (rank 0, element 3)": the decoder masked the sign away.
    from fsdp_verify.checks.identity import IdentityCodes
    codes = IdentityCodes({"s": ("w", "fsdp_all_gather", 2)})
    coded = codes.value(0, _Named("s"), torch.zeros(8, dtype=dtype))
    assert codes.decode(coded, 3) == "w (rank 0, element 3)"
    assert codes.decode(coded.float().neg().to(dtype), 3) == "w (rank 0, element 3) negated"
    if dtype != torch.float8_e4m3fn:  # three times a code is no code
        assert codes.decode(coded.float().mul(3).to(dtype), 3).startswith("value ")


def test_a_consumer_of_several_collective_results_is_named_by_the_input_that_differs():
    # The graph's output node reads every gradient: the layout finding named the last parameter the
    # consumer map met ("consumer 'output' of layers.1.bias") for a difference in layers.0.weight's,
    # and inductor's folded-cast excuse reads that parameter.
    from fsdp_verify.checks.identity import consumer_slots, watched_consumers
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.execute.world import build_world
    from fsdp_verify.graph.examples import mlp_graph
    from fsdp_verify.model.case import Case
    from fsdp_verify.targets import get_target
    case = Case(mlp_graph(device="cpu"))
    slots = consumer_slots(build_world(case)[0])["output"]
    assert watched_consumers(build_world(case)[0])["output"] == "layers.1.bias"
    assert sorted(slots.values()) == sorted(["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"])
    findings, _ = check_all(get_target("mutant:avg_twice"), case)
    layout = next(f for f in findings if f.checker == "layout")
    assert layout.details["param"] == slots[layout.details["input"]] == "layers.0.weight"
    assert layout.message.startswith("rank 0: consumer 'output' of layers.0.weight received value ")
    assert layout.message.endswith("where the original delivers layers.0.weight's element 0 (average over 2 ranks)")


def test_a_pass_that_tells_groups_apart_by_size_is_killed_on_two_groups_of_one_size(monkeypatch):
    # No graph held two groups of one size with different ranks, so a pass keying its buckets by
    # the group's size fused nothing wrong anywhere. Expert parameters sharded over the mesh's
    # other axis (strided subgroups) give such a pair, and the layout check names the wrong ranks.
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.model.case import Case
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    from fsdp_verify.targets import get_target
    from helpers import TESTS
    monkeypatch.syspath_prepend(str(TESTS))

    def errors(name: str, strided: bool) -> list:
        bp = Blueprint(blocks=((ParamDraw((2, 3), expert=True), ParamDraw((2, 3), expert=True, strided_group=strided)),),
                       degree=4, expert_degree=2)
        target = get_target(f"fx-pass:helpers.torch_passes:{name}")
        findings, ctx = check_all(target, target.normalise(Case(render(bp))))
        return [f for f in findings if f.severity == "error"], ctx.metrics["effect"]

    killed, effect = errors("fuses_first_two_gathers_by_size", True)
    assert effect["after"]["all_gather"] < effect["before"]["all_gather"]
    layout = next(f for f in killed if f.checker == "layout")
    assert layout.rule == "element_misplaced" and "(rank 1, element 0)" in layout.message \
        and "delivers blocks.0.experts.w1 (rank 2, element 0)" in layout.message
    assert errors("fuses_first_two_gathers", True)[0] == []  # keyed by name: nothing fused across groups
    hidden, effect = errors("fuses_first_two_gathers_by_size", False)  # one group: the same bug fuses rightly
    assert hidden == [] and effect["after"]["all_gather"] < effect["before"]["all_gather"]


def test_a_sub_group_s_sum_is_named_over_its_own_ranks(monkeypatch):
    # An expert gradient is summed over its expert group, not the world: the message read "received
    # value 2.306640625 where the original delivers value 2.556640625" for two swapped experts.
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.model.case import Case
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    from fsdp_verify.targets import get_target
    from helpers import TESTS
    monkeypatch.syspath_prepend(str(TESTS))
    bp = Blueprint(blocks=((ParamDraw((2, 3), expert=True, reduce_op="sum"),
                            ParamDraw((2, 3), expert=True, reduce_op="sum")),), degree=4, expert_degree=2)
    target = get_target("fx-pass:helpers.torch_passes:swaps_two_scatters")
    findings, _ = check_all(target, target.normalise(Case(render(bp))))
    layout = next(f for f in findings if f.checker == "layout")
    assert "'s element 0 (sum over 2 ranks of group fsdp_expert)" in layout.message, layout.message
    assert "where the original delivers blocks.0.experts.w" in layout.message


def test_a_consumer_that_reads_one_result_in_two_places_is_a_layout_finding(monkeypatch):
    # The runs recorded a consumer's inputs once per node it reads: where the rewrite's output read
    # one gradient twice (the original: two gradients), it held one input fewer, the slot-by-slot
    # comparison stopped at the shorter, and layout "proved" a case numerics failed.
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.model.case import Case
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    from fsdp_verify.targets import get_target
    from helpers import TESTS
    monkeypatch.syspath_prepend(str(TESTS))
    bp = Blueprint(blocks=((ParamDraw((2, 3)), ParamDraw((2, 3))),))
    target = get_target("fx-pass:helpers.torch_passes:reads_one_scatter_twice")
    findings, _ = check_all(target, target.normalise(Case(render(bp))))
    layout = [f for f in findings if f.checker == "layout"]
    assert layout and layout[0].rule == "element_misplaced", [f.message for f in findings]
    assert "consumer 'output' of blocks.0.w1 received blocks.0.w0's element 0" in layout[0].message, layout[0].message
