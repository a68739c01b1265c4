"""What a nemesis run may draw (pure logic): each storage mode allows its own storage fault and no
other, ``--faults`` names what is wrong, and an ``s3-errors`` fault's rules are drawn from the seed,
always losing answers to stored PUTs of commits and data files."""

from __future__ import annotations

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "build"))

from deltanode_nemesis.kinds import STORAGE_FAULTS, FaultKind, StorageMode, allowed, parse_kinds
from deltanode_nemesis.main import parse
from deltanode_nemesis.s3_root import COMMIT, DATA, draw_rules

from tests.integration.s3_fault_proxy import Fault

PROCESS_KINDS = [k for k in FaultKind if k not in STORAGE_FAULTS]


@pytest.mark.parametrize(("mode", "own"), [(StorageMode.LOCAL, []), (StorageMode.TMPFS, [FaultKind.FILL_DISK]),
                                           (StorageMode.POWERCUT, [FaultKind.POWER_CUT]),
                                           (StorageMode.S3, [FaultKind.S3_ERRORS])])
def test_each_mode_allows_every_process_and_broker_fault_and_its_own_storage_fault_only(mode, own):
    assert allowed(mode) == [k for k in FaultKind if k in PROCESS_KINDS or k in own]
    assert FaultKind.PARTITION_BROKER in allowed(mode)
    assert parse_kinds("", mode) == allowed(mode)


def test_faults_names_a_storage_fault_of_another_mode_and_the_mode_it_needs():
    with pytest.raises(ValueError, match="fill-disk needs --storage tmpfs.*--storage s3"):
        parse_kinds("kill-datanode,fill-disk", StorageMode.S3)
    with pytest.raises(ValueError, match="power-cut needs --storage powercut; s3-errors needs --storage s3"):
        parse_kinds("power-cut,s3-errors", StorageMode.LOCAL)


def test_faults_names_an_unknown_kind_and_refuses_none():
    with pytest.raises(ValueError, match="unknown kind.*kill-everything"):
        parse_kinds("kill-datanode, kill-everything", StorageMode.TMPFS)
    with pytest.raises(ValueError, match="at least one"):
        parse_kinds(",", StorageMode.TMPFS)


def test_faults_keeps_the_order_given_once_each():
    assert parse_kinds("power-cut, partition-broker,power-cut", StorageMode.POWERCUT) == [
        FaultKind.POWER_CUT, FaultKind.PARTITION_BROKER]


def test_the_command_line_refuses_a_storage_fault_its_storage_mode_lacks(capsys):
    with pytest.raises(SystemExit):
        parse(["--storage", "local", "--faults", "fill-disk"])
    assert "fill-disk needs --storage tmpfs" in capsys.readouterr().err
    args = parse(["--storage", "s3", "--mq", "pulsar"])
    assert args.kinds == allowed(StorageMode.S3) and args.mq == "pulsar"


def test_an_s3_fault_always_loses_answers_to_stored_commit_and_data_puts_and_is_the_seeds():
    for seed in range(20):
        rules = draw_rules(random.Random(seed))
        lost = {(r.method, r.key) for r in rules if r.fault is Fault.LOST_ANSWER}
        assert {("PUT", COMMIT), ("PUT", DATA)} <= lost
        assert 4 <= len(rules) <= 6 and len({r.label for r in rules}) == len(rules)
        assert all(r.times is None and 0 < r.probability <= 0.5 for r in rules)
        assert rules == draw_rules(random.Random(seed))
    assert draw_rules(random.Random(1)) != draw_rules(random.Random(2))
