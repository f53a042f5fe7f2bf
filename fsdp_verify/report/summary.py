"""The campaign summary table and its JUnit XML form."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from fsdp_verify.checks.exchange import DIVERGENT_EVERY
from fsdp_verify.targets.debug_logs import DEBUG_EVERY
from fsdp_verify.model import classes
from fsdp_verify.report.tally import EFFECT, PROOFS, Result, launches_text
from fsdp_verify.reference.planner import SKIP_REASONS, SPLIT_REASONS

EXPECTED = {"skip": SKIP_REASONS, "split": tuple(r for r in SPLIT_REASONS if r != "incompatible_key"),
            "singleton": ("oversized",)}


def coverage_lines(result: Result) -> list[str]:
    """Reason coverage of the planner per action, with what was never reached (a target without a
    planner in the reference's format has no decisions: said, not listed as unreached)."""
    if result.has_planner is False:
        return ["  none: the target makes no plans in the reference's format (what it fused: the rewrites line)"]
    lines = []
    for action, reasons in EXPECTED.items():
        hit = [r for r in reasons if (action, r) in result.decisions]
        missing = [r for r in reasons if (action, r) not in result.decisions]
        lines.append(f"  {action:<10} {len(hit):>2}/{len(reasons):<2}" + (f" unreached: {', '.join(missing)}"
                                                                          if missing else ""))
    return lines


def effect_line(result: Result) -> str:
    """What the rewrites did to the collectives: a run that fused nothing proved nothing of a
    bucketing pass, whatever its checks said."""
    effect = result.effect
    if not effect["rewritten"]:
        return ("rewrites        none judged (every case's target raised or was refused)" if result.examples else
                "rewrites        none judged (no case ran)")
    kinds = launches_text(effect)
    return (f"rewrites        fused launches in {effect['fused']} of the {effect['rewritten']} cases it rewrote "
            f"({effect['fusable']} held two or more launches of one kind on one group; the graphs of "
            f"{effect['changed']} changed at all)"
            + (f", added launches in {effect['grew']}" if effect["grew"] else "")
            + (f"; launches summed over ranks: {kinds}" if kinds else "; no launches"))


def vacuous_lines(result: Result, required: bool = False) -> list[str]:
    """The loud line of a run whose target fused nothing where it could have (a failure only under
    ``--require-fusion``, and never for a run stopped early)."""
    if not result.vacuous:
        return []
    changed = result.effect["changed"]
    what = ("it left every graph as it was" if not changed else
            f"it changed the graphs of {changed} cases without fusing (a scheduling pass?)")
    return [f"{'FAIL' if result.fails_fusion(required) else 'WARNING'}: the target fused no launch in any of the "
            f"{result.effect['fusable']} cases that held two launches of one kind on one group: {what}, so no "
            f"check judged a bucket of it (a pass that never matches, on another overload or behind a switch that "
            f"is off, passes every check" + ("" if required else "; --require-fusion fails such a run") + ")"]


def class_line(result: Result) -> str:
    """Failures per triage class: only defects (and external defect candidates) count as bugs, so
    the bugs' classes are said inside their count and the others apart from it."""
    counts: dict[classes.FailureClass, int] = {}
    for failure in result.failures:
        counts[classes.of(failure)] = counts.get(classes.of(failure), 0) + 1
    if not counts:
        return "none"

    def listed(bug: bool) -> str:
        return ", ".join(f"{n} {kind.value}" for kind, n in sorted(counts.items(), key=lambda item: item[0].value)
                         if kind.is_bug == bug)
    bugs = sum(n for kind, n in counts.items() if kind.is_bug)
    others = listed(False)
    return (f"{bugs} bug{'' if bugs == 1 else 's'}" + (f" ({listed(True)})" if bugs else "")
            + (f"; not bugs: {others}" if others else ""))


def checker_line(result: Result) -> str:
    """Failures per checker, the bugs' apart from the excused ones: an ordering count made of
    contract mismatches is no count of ordering bugs."""
    bugs: dict[str, int] = {}
    others: dict[str, int] = {}
    for failure in result.failures:
        counts = bugs if classes.of(failure).is_bug else others
        for checker in failure.get("checkers", ()):
            counts[checker] = counts.get(checker, 0) + 1

    def listed(counts: dict[str, int]) -> str:
        return ", ".join(f"{checker} {n}" for checker, n in sorted(counts.items()))
    if not others:
        return listed(bugs) or "none"
    return f"{listed(bugs) or 'no bugs'}; not bugs: {listed(others)}"


def repro_line(result: Result) -> str:
    """What the standalone repros of the defect candidates showed: the precision of what the
    harness reported against an external target, from the scripts' outcomes alone."""
    tally = result.repro
    waiting = sum(classes.of(f) is classes.FailureClass.CANDIDATE for f in result.failures)
    if tally.skipped:
        return f"repro triage    skipped ({tally.skipped}): {waiting} defect candidate{'' if waiting == 1 else 's'} untriaged"
    if not tally.ran:
        return "repro triage    no defect candidates"
    judged = tally.reproduced + tally.not_reproduced
    precision = f"precision {tally.reproduced / judged:.0%}" if judged else "precision n/a"
    return (f"repro triage    {tally.reproduced} of {judged} defect candidates fail on torch alone ({precision}); "
            f"{tally.not_reproduced} harness limitation{'' if tally.not_reproduced == 1 else 's'}"
            + (f"; {tally.unjudged} whose script could not judge them (still candidates)" if tally.unjudged else ""))


def repro_properties(result: Result) -> list[tuple[str, object]]:
    """The repro triage as JUnit properties."""
    tally = result.repro
    judged = tally.reproduced + tally.not_reproduced
    return [("repro_reproduced", tally.reproduced), ("repro_not_reproduced", tally.not_reproduced),
            ("repro_unjudged", tally.unjudged), ("repro_skipped", tally.skipped or "no"),
            ("repro_precision", f"{tally.reproduced / judged:.3f}" if judged else "n/a")]


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "n/a"


def skipped_lines(result: Result) -> list[str]:
    """Checks that did not run on some cases, and why: a weakened run says so."""
    if not result.skipped:
        return ["skipped checks  none"]
    return ["skipped checks  (these cases were judged without them):",
            *(f"  {what}: {count} cases" for what, count in sorted(result.skipped.items()))]


def ranks_lines(result: Result) -> list[str]:
    """Simulated or real ranks, said either way: backend, device and rank count of every real pool."""
    ranks = result.ranks or {"mode": "simulated"}
    if ranks.get("mode") != "real":
        return [f"ranks           simulated in this one process: {ranks.get('note', 'no real rank processes')}"]
    placements = "; ".join(f"{text}" for _, text in sorted(ranks.get("placements", {}).items())) or "none started"
    lines = [f"ranks           real ({ranks.get('requested_backend')} asked): {placements}; hash seeds "
             f"{ranks.get('hash_seeds')}",
             f"real ranks      {ranks.get('cases', 0)} cases planned on rank processes, {ranks.get('executed', 0)} run "
             f"with real collectives (fraction {ranks.get('fraction', 1):g}), {ranks.get('seconds', 0):.1f}s, "
             f"pool restarts {ranks.get('restarts', 0)}"]
    lines += [f"  not on real ranks: {why}: {count} cases" for why, count in sorted(ranks.get("not_run", {}).items())]
    lines += [f"  no pool of {world} ranks: {why}" for world, why in sorted(ranks.get("pools_not_started", {}).items())]
    deaths = ranks.get("rank_deaths", {})
    if any(deaths.values()):
        lines.append(f"  rank deaths during a case: {deaths.get('reproduced', 0)} the same on every rerun (findings), "
                     f"{deaths.get('not_reproduced', 0)} not (an outside kill or a flaky target: the rerun judged "
                     f"the case)")
    lines += [f"  pool: {event}" for event in ranks.get("events", [])[-5:]]
    lines += [f"  death not reproduced: {event}" for event in ranks.get("deaths_not_reproduced", [])[-5:]]
    return lines


def stage_line(result: Result) -> str:
    """Where the CPU went: each stage's share of what the stages add up to, largest first."""
    total = sum(result.cpu_by_stage.values())
    if not total:
        return "cpu by stage    not measured"
    parts = [f"{stage} {100 * seconds / total:.0f}%"
             for stage, seconds in sorted(result.cpu_by_stage.items(), key=lambda item: -item[1])]
    return f"cpu by stage    {total:.1f} CPU-s: " + ", ".join(parts)


def isolation_line(result: Result) -> str:
    """How cases were isolated; in-process is said, since a crash or hang there ends the run."""
    if not result.isolated:
        return ("isolation       NONE (--in-process): a target that crashes, exits or hangs ends the run "
                "instead of being a finding")
    kept = ("kept per case and attached to its crash, hang or raise (--show-target-output prints it)"
            if result.output_kept else "printed as it came (--show-target-output)")
    return (f"isolation       persistent child per worker: {result.forks} processes forked for "
            f"{result.examples + result.shrink_steps} cases (a fresh one after each crash, hang, raise or "
            f"changed process state); the target's output {kept}")


def ranks_properties(result: Result) -> list[tuple[str, object]]:
    """The JUnit properties that state how ranks ran (never a silent fallback)."""
    ranks = result.ranks or {"mode": "simulated"}
    props: list[tuple[str, object]] = [("ranks_mode", ranks.get("mode", "simulated"))]
    if ranks.get("mode") == "real":
        props += [("real_backend", ranks.get("backend")), ("real_device", ranks.get("device")),
                  ("real_rank_counts", ",".join(map(str, ranks.get("rank_counts", [])))),
                  ("real_backend_requested", ranks.get("requested_backend")), ("real_fraction", ranks.get("fraction")),
                  ("real_cases", ranks.get("cases", 0)), ("real_executed", ranks.get("executed", 0)),
                  ("real_pool_restarts", ranks.get("restarts", 0)),
                  ("real_rank_deaths_reproduced", ranks.get("rank_deaths", {}).get("reproduced", 0)),
                  ("real_rank_deaths_not_reproduced", ranks.get("rank_deaths", {}).get("not_reproduced", 0))]
        props += [(f"real_placement:{world}_ranks", text) for world, text in sorted(ranks.get("placements", {}).items())]
        props += [(f"real_not_run:{why}", count) for why, count in sorted(ranks.get("not_run", {}).items())]
        props += [(f"real_pool_not_started:{world}_ranks", why)
                  for world, why in sorted(ranks.get("pools_not_started", {}).items())]
    return props


def summary_text(result: Result, target: str, require_fusion: bool = False) -> str:
    """The end-of-campaign table."""
    rate = result.examples / result.seconds if result.seconds else 0.0
    by_checker = checker_line(result)
    lines = [*(["STOPPED EARLY by a signal: the figures cover the examples run until then"]
               if result.interrupted else []),
             f"target          {target}",
             f"examples        {result.examples} generated " + (f"(+{result.shrink_steps} shrink steps)" if result.shrunk
                                                                else "(failures saved as found, unshrunk: --no-shrink)"),
             f"seconds         {result.seconds:.1f}",
             f"examples/s      {rate:.2f}",
             f"failures        {len(result.failures)} distinct, {result.repeats} repeats of known bugs",
             *([f"known bugs      {known_text(result)}"] if result.known_read is not None else []),
             f"by class        {class_line(result)}",
             repro_line(result),
             f"by checker      {by_checker}",
             f"invalid cases   {result.invalid} (cannot be judged: counted, never passed)",
             effect_line(result),
             *vacuous_lines(result, require_fusion),
             isolation_line(result),
             stage_line(result),
             f"outputs judged  {_share(result.judged_elements, result.output_elements)} of output elements "
             f"compared bit for bit",
             f"proved by       ordering: {result.proofs['ordering_segments_lockstep']} schedule segments by the "
             f"lockstep witness, {result.proofs['ordering_segments_z3']} by z3; numerics: "
             f"{result.proofs['numerics_shared_runs']} cases on the shared runs, "
             f"{result.proofs['numerics_plain_runs']} on plain runs; planner: "
             f"{result.proofs['planner_rounds_watched']} later-round plans against the graph seen in the run, "
             f"{result.proofs['planner_rounds_replayed']} against a replay; layout: "
             f"{result.proofs['layout_proved']} cases proved for every input (distinct codes), "
             f"{result.proofs['layout_two_runs']} told apart by a second coded run (codes wrapped once), "
             f"{result.proofs['layout_tested']} only tested (codes wrapped past two runs); exchange: "
             f"{result.proofs['exchange_divergent_worlds']} worlds made to disagree (one case in {DIVERGENT_EVERY}, "
             f"by seed; every case's reports edited); target logs: {result.proofs['target_debug_logs']} cases with "
             f"the target's loggers at DEBUG (one case in {DEBUG_EVERY}, by seed)"
             + (f"; {result.proofs['planner_disagreements_stopped']} worlds whose ranks' graphs the spec plans "
                f"differently (uneven shards) stopped by the target as spec 3.6 says: the planner judged them, no "
                f"rewrite was" if result.proofs['planner_disagreements_stopped'] else "")
             + (f"; {result.proofs['generators_excused']} draws from a global random generator the target's callers "
                f"restore, not judged" if result.proofs['generators_excused'] else ""),
             *skipped_lines(result),
             *ranks_lines(result),
             "reason coverage (first round, rank 0):", *coverage_lines(result),
             *(f"note: {note}" for note in result.notes)]
    for failure in result.failures:
        lines.append(f"  FAIL {failure['file'] or '(NOT SAVED)'} [{', '.join(failure['checkers'])}] "
                     f"({failure['nodes']} nodes; {failure.get('class', 'defect')}): {failure['message'][:200]}\n"
                     + "".join(f"       why {classes.of(failure).value}: {reason[:200]}\n"
                               for reason in class_reasons(failure))
                     + f"       replay: {replay_command(failure, target)}"
                     + (f"\n       repro:  {repro_command(failure['file'])}" if failure.get("file") else ""))
        if failure.get("file") is None and "case" in failure:  # the corpus could not be written: nothing is lost
            lines.append("       the case, in full (save it as a .json file to replay it):\n" +
                         json.dumps(failure["case"], sort_keys=True))
    return "\n".join(lines)


def class_reasons(failure: dict) -> list[str]:
    """Why a failure is not counted as a bug (a contract mismatch, invalid input, a harness
    limitation): the class alone does not say which form or rule excused it. Every reason, as each
    excuses its own findings (a lost node by one, a broken span by another)."""
    if classes.of(failure).is_bug:
        return []
    return [str(reason) for reason in failure.get("class_reasons") or ()]


def replay_command(failure: dict, target: str) -> str:
    """The command that reproduces one saved failure."""
    return f"fsdp-verify replay {failure['file'] or 'CASE.json'} --target {target}"


def repro_command(file: str | None, target: str = "") -> str:
    """The command that writes a saved case's standalone script (torch only for PyTorch's passes);
    ``target`` when it is not the one the case was recorded against."""
    stem = Path(file).stem if file else "CASE"
    return f"fsdp-verify repro {file or 'CASE.json'}" + (f" --target {target}" if target else "") + f" -o repro_{stem}.py"


def known_text(result: Result) -> str:
    """What the corpus folder said about bugs saved before the run, and which of them were met again
    (empty where no campaign read a folder: a result made by another command)."""
    read = result.known_read
    if read is None:
        return ""
    if read["rediscover"]:
        return f"not read (--rediscover): a bug {read['folder']} holds is found, shrunk and saved anew"
    met = ", ".join(f"{Path(file).name} x{n}" for file, n in result.known_sightings.most_common(3))
    more = len(result.known_sightings) - 3
    unread = (f"; {read['unsigned']} failing files carry no signature (their bugs count as new)" if read["unsigned"] else "") + \
        (f"; {len(read['unreadable'])} unreadable files left alone ({', '.join(read['unreadable'][:3])})"
         if read["unreadable"] else "")
    if not result.known:
        return f"none saved against this target in {read['folder']} before this run" + unread
    sightings = (f"met again: {sum(result.known_sightings.values())} sightings of {len(result.known_sightings)} "
                 f"({met}{f', +{more} more' if more > 0 else ''}), not saved again" if met else "none met again")
    return f"{len(result.known)} saved in {read['folder']} before this run; {sightings}" + unread


def junit_xml(result: Result, target: str, require_fusion: bool = False) -> str:
    """A JUnit report: the campaign, plus one test case per distinct finding (the campaign saves
    one case per bug signature) that names its checkers and carries its replay command. Only
    defects (and external defect candidates) fail; contract mismatches and invalid input are
    reported as skipped, with their class."""
    bugs = [f for f in result.failures if classes.of(f).is_bug]
    known = len(result.known_sightings)
    vacuous = vacuous_lines(result, require_fusion)
    suite = ET.Element("testsuite", name=f"fsdp-verify fuzz {target}", tests=str(1 + len(result.failures) + known),
                       failures=str(len(bugs) + result.fails_fusion(require_fusion)),
                       skipped=str(len(result.failures) - len(bugs) + known
                                   + bool(vacuous and not result.fails_fusion(require_fusion))),
                       time=f"{result.seconds:.3f}")
    campaign = ET.SubElement(suite, "testcase", classname="fsdp_verify.fuzz", name="campaign",
                             time=f"{result.seconds:.3f}")
    properties = ET.Element("properties")
    suite.insert(0, properties)
    kinds = [classes.of(f) for f in result.failures]
    for name, value in (("invalid_cases", result.invalid), ("output_elements", result.output_elements),
                        ("judged_elements", result.judged_elements),
                        *((key, result.proofs[key]) for key in PROOFS), ("exchange_divergent_every", DIVERGENT_EVERY),
                        ("bugs", sum(c.is_bug for c in kinds)),
                        ("contract_mismatches", kinds.count(classes.FailureClass.MISMATCH)),
                        ("invalid_inputs", kinds.count(classes.FailureClass.INVALID_INPUT)),
                        ("upstream_defects", kinds.count(classes.FailureClass.UPSTREAM)),
                        ("harness_limitations", kinds.count(classes.FailureClass.LIMITATION)),
                        ("isolated", result.isolated), ("isolation_forks", result.forks),
                        ("shrunk", result.shrunk), *repro_properties(result),
                        ("known_bugs_read", "not read" if not result.known_read or result.known_read["rediscover"]
                         else len(result.known)),
                        ("known_bug_sightings", sum(result.known_sightings.values())),
                        *((f"effect_{key.replace(':', '_')}", result.effect[key]) for key in EFFECT),
                        ("vacuous", result.vacuous), ("fusion_required", require_fusion)):
        ET.SubElement(properties, "property", name=name, value=str(value))
    for what, count in sorted(result.skipped.items()):
        ET.SubElement(properties, "property", name=f"skipped_check:{what}", value=str(count))
    for stage, seconds in sorted(result.cpu_by_stage.items()):
        ET.SubElement(properties, "property", name=f"cpu_seconds:{stage}", value=f"{seconds:.3f}")
    for name, value in ranks_properties(result):
        ET.SubElement(properties, "property", name=name, value=str(value))
    if vacuous:  # the campaign proved nothing of the bucketing: never a plain pass
        ET.SubElement(campaign, "failure" if result.fails_fusion(require_fusion) else "skipped",
                      message=vacuous[0][:500])
    ET.SubElement(campaign, "system-out").text = "\n".join(
        [f"{result.examples} examples", effect_line(result), isolation_line(result), *skipped_lines(result),
         *ranks_lines(result)])
    for file, sightings in sorted(result.known_sightings.items()):
        # a bug an earlier run saved, met again: reported, never a new failure (its file replays it)
        known = ET.SubElement(suite, "testcase", classname="fsdp_verify.fuzz.known", name=Path(file).name)
        ET.SubElement(known, "skipped", message=f"[known] met {sightings} times again; saved before this run "
                                                f"in {file}").text = f"replay: fsdp-verify replay {file}"
    for failure in result.failures:
        case = ET.SubElement(suite, "testcase", classname=f"fsdp_verify.fuzz.{'+'.join(failure['checkers'])}",
                             name=Path(failure["file"]).name if failure["file"] else "not-saved")
        command = replay_command(failure, target) + (f"\nrepro: {repro_command(failure['file'])}" if failure["file"] else "")
        kind = classes.of(failure).value
        verdict = "failure" if classes.of(failure).is_bug else "skipped"  # not a bug of the target
        ET.SubElement(case, verdict, message=f"[{kind}] {failure['message'][:500]}",
                      type=",".join(failure["checkers"])).text = (
            f"{failure['message']}\n\n" + "".join(f"why {kind}: {reason}\n" for reason in class_reasons(failure))
            + f"replay: {command}")
        ET.SubElement(case, "system-out").text = (f"{failure['file']}\nreplay: {command}" if failure["file"] else
                                                  "NOT SAVED (the corpus folder cannot be written); the case:\n"
                                                  + json.dumps(failure.get("case"), sort_keys=True))
    return ET.tostring(suite, encoding="unicode")
