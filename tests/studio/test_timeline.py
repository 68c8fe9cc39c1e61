def test_dump(records, recorded):
    from engine.store import Store
    for case, r in records.items():
        print("=====", case, r.outcome, r.failure)
        for p in r.phases: print("  ", p)
        for t in r.turns: print("  T", t.index, t.status, t.prompt, t.ms)
        for it in r.trajectory: print("  I", it.to_json())
    s = Store(recorded.store_path)
    ev = s.events(trial_id=recorded.trials["writes_greet"])
    print(len(ev)); [print(e) for _, e in ev[:8]]
    s.close()
