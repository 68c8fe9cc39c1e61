"""Trajectories and records built by hand, for the compare tests of the engine and the studio."""

from engine.models import TrajectoryItem, TrialRecord


def cmd(text: str, turn: int = 1) -> TrajectoryItem:
    return TrajectoryItem(kind="command", turn=turn, command=text, exit_code=0, output="ok")


def steps(n: int = 12) -> list[TrajectoryItem]:
    """A trajectory of all four kinds, every step distinct."""
    items = []
    for i in range(n):
        match i % 4:
            case 0:
                items.append(cmd(f"pytest -q tests/test_{i}.py"))
            case 1:
                items.append(TrajectoryItem(kind="toolCall", turn=1, name="edit", input={"path": f"f{i}.py"}))
            case 2:
                items.append(TrajectoryItem(kind="fileChange", turn=1, path=f"f{i}.py", change="modify"))
            case _:
                items.append(TrajectoryItem(kind="message", turn=1, role="assistant" if i % 8 == 3 else "user",
                                            text=f"note {i}"))
    return items


def record(trajectory: list[TrajectoryItem], id: str = "t_a", **fields) -> TrialRecord:
    return TrialRecord(id=id, batch_id="b_1", run_id="r_1", case_id="c", variant="v", trial=1,
                       trigger="api", trajectory=trajectory, **fields)
