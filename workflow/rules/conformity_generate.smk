# Study C (seed 002): generation of Round 1 / Round 2 answers and anchors.
# The study consumes the item tables of its datasets; generation, judging and
# fitting rules extend `conformity_targets` as they land.


def conformity_targets():
    if not config["conformity"]["enabled"]:
        return []
    return items_for(config["conformity"]["datasets"])
