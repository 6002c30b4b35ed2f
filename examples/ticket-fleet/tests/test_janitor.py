"""Our janitors under fence: which of them can give capacity back, or retry, while a ticket exists.

``fence_check`` comes from fence's pytest plugin: both of fence's engines on
our policy and our help desk, judged on the tickets that were really created,
never on what our code answers.
"""

from ticket_fleet.helpdesk import HelpDesk
from ticket_fleet.janitor import LookUpThenRelease


def test_the_unique_key_stops_a_second_ticket_but_not_an_early_release(fence_check):
    checked = fence_check(LookUpThenRelease, destination=HelpDesk)
    checked.assert_proved("no_duplicate_writes")
    checked.assert_violated("no_release_while_effect_exists", "no_silent_replay")


def test_cancelling_the_attempt_first_is_proved_safe(fence_check):
    checked = fence_check("ticket_fleet.janitor:CancelUnlessCreated", destination="ticket_fleet.helpdesk:HelpDesk")
    # Our gate as well: a change to the janitor or the help desk that breaks any invariant fails here.
    checked.assert_proved()
