from tokenmill.sim import EventClock


def test_events_run_in_time_order_and_ties_in_schedule_order() -> None:
    clock = EventClock()
    seen: list[str] = []
    clock.at(2.0, lambda: seen.append("b"))
    clock.at(1.0, lambda: seen.append("a"))
    clock.at(2.0, lambda: seen.append("c"))
    clock.at(1.0, lambda: clock.after(0.5, lambda: seen.append("a+0.5")))
    assert clock.run() == 2.0
    assert seen == ["a", "a+0.5", "b", "c"]


def test_run_until_stops_before_later_events() -> None:
    clock = EventClock()
    seen: list[float] = []
    for t in (1.0, 5.0, 9.0):
        clock.at(t, lambda t=t: seen.append(t))  # type: ignore[misc]
    assert clock.run(until=6.0) == 6.0
    assert seen == [1.0, 5.0]
    clock.run()
    assert seen == [1.0, 5.0, 9.0]


def test_an_event_in_the_past_runs_now() -> None:
    clock = EventClock()
    out: list[float] = []
    clock.at(3.0, lambda: clock.at(1.0, lambda: out.append(clock.now)))
    clock.run()
    assert out == [3.0]
