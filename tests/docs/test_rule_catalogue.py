"""Every rule id the code cites (L2, I6, R3, S13, ...) resolves in docs/rules.md."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULE_ID = re.compile(r"(?<![A-Za-z0-9_])((?:FF|KS|[PFRLHIETCDXS])[0-9]{1,2})(?![A-Za-z0-9_])")
DEFINED = re.compile(r"^- \*\*((?:FF|KS|[A-Z])[0-9]{1,2})\. ", re.MULTILINE)


def _cited_ids() -> dict[str, str]:
    cited: dict[str, str] = {}
    for path in sorted((ROOT / "minibroker").rglob("*.py")):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            comment_or_doc = line.split("#", 1)[1] if "#" in line else line
            for rule in RULE_ID.findall(comment_or_doc):
                cited.setdefault(rule, f"{path.relative_to(ROOT)}:{lineno}")
    return cited


def test_every_rule_id_cited_in_the_code_is_defined_in_the_catalogue() -> None:
    defined = set(DEFINED.findall((ROOT / "docs" / "rules.md").read_text()))
    missing = {rule: where for rule, where in _cited_ids().items() if rule not in defined}
    assert not missing, f"rule ids cited but not in docs/rules.md: {missing}"


def test_the_catalogue_defines_each_id_once() -> None:
    ids = DEFINED.findall((ROOT / "docs" / "rules.md").read_text())
    assert len(ids) == len(set(ids)) and len(ids) > 100
