"""`kgwe controller` wires its cost duties to a real, migrated SQLite store."""


def test_controller_cmd_builds_cost_duties_on_a_migrated_store(tmp_path):
    import argparse

    from kgwe.reconcile import controller_cmd

    parser = argparse.ArgumentParser()
    controller_cmd.add_arguments(parser)
    args = parser.parse_args(["--cache-dir", str(tmp_path / "cache"), "--cluster", "prod"])
    duties = controller_cmd._cost_duties(args)
    assert duties.service.cluster == "prod"
    assert (tmp_path / "cache" / "kgwe-cost.db").is_file()
    assert duties.service.store.open_usage() == []  # the schema is there: migrations ran
