"""Sums worked from the help centre's figures (chatbot/sums.py): every operand is a figure of the passage, and
anything the figures do not settle is left unworked. Pure text: the shipped articles, no model."""

import json
import re

import pytest

from chatbot.passages import article_units
from chatbot.questions import needs_sum
from chatbot.sums import worked_sum
from data import DATA_DIR

ARTICLES = json.loads((DATA_DIR / "articles.json").read_text())


def line(article: str, starts: str) -> str:
    return next(unit for unit in article_units(ARTICLES[article]) if unit.startswith(starts))


TEAM = line("plans-and-pricing", "3. Team")
PERSONAL = line("plans-and-pricing", "2. Personal")
NONPROFIT = line("discounts", "2. Registered nonprofits")
STUDENT = line("discounts", "1. Students")
PLANS = frozenset({"free", "personal", "team", "enterprise"})  # the price list's labels


@pytest.mark.parametrize(("question", "passage", "result"), [
    ("how much would team be for 5 of us for a year, paying annually", TEAM, "= $600 per year."),
    ("we're an office of 12 people, what does team cost a month", TEAM, "12 users × $12 per user per month = $144"),
    ("just 2 of us on team, what's the monthly bill", TEAM, "so 2 are billed as 3. 3 users × $12"),
    ("team for twelve users, how much is it all together", TEAM, "= $144 per month. 12 users × $120"),
    ("We're 100% remote, 6 employees, how much is Team monthly?", TEAM, "6 users × $12 per user per month = $72"),
    ("7 of us. what would team cost for a year paying yearly, versus paying monthly for 12 months?", TEAM,
     "7 users × 12 months × $12 per user per month = $1,008 for 12 months. 7 users × $120 per user per year = $840"),
    ("charity with 10 staff, with the nonprofit discount how much is team each month", NONPROFIT,
     "10 users × $8.40 per user per month = $84 per month."),
    ("1,500 users on team, yearly total?", TEAM, "1,500 users × $120 per user per year = $180,000 per year."),
    ("team for 8 ppl, yearly price?", TEAM, "8 users × $120 per user per year = $960 per year."),
    ("eight people on team for 6 months, what's the total cost", TEAM, "8 users × 6 months × $12"),
    ("we're 4 on team, how much storage is that all together", TEAM, "4 users × 2 TB per user = 8 TB"),
    ("so the team plan for just us 2 would be $24 a month right?", TEAM, "so 2 are billed as 3. 3 users × $12"),
    ("its just me and my business partner. how much a month would team be for us", TEAM,
     "so 2 are billed as 3. 3 users × $12 per user per month = $36 per month."),
    ("if we get team for 4 people how much storage do we get in total",
     "\n".join(u for u in article_units(ARTICLES["team-setup-invite"]) if "$12" in u or "Each member gets" in u),
     "4 users × 2 TB per user = 8 TB"),
    ("how much do i save a year on personal paying yearly vs monthly", PERSONAL, "$96 a year billed monthly, "
     "against $80 billed yearly: $16 a year less."),
    ("if i pay personal monthly instead how much more is that over the year?", PERSONAL, "$96 a year billed "
     "monthly, against $80 billed yearly: $16 a year less."),
    ("8 person team. how much do we save going annual", TEAM, "For 8 users: 8 × $24 = $192 a year less."),
    ("registered charity, 10 staff, what would team cost per year with the nonprofit discount", NONPROFIT,
     "10 users × $84 per user per year = $840 per year."),
    ("student, 3 years of uni left. on the student yearly price how much is that in total", STUDENT,
     "3 years × $40 per year = $120 for 3 years."),
])
def test_a_sum_the_figures_settle_is_worked_from_them(question, passage, result):
    assert needs_sum(question) or "storage" in question
    worked = worked_sum(question, passage)
    assert result in worked, worked
    operands = re.findall(r"(?:× |against )(\$[\d,.]+|[\d.]+ TB)", worked)
    # Each operand is a figure of the passage, or one worked out in an earlier step.
    assert operands and all(op in passage or f": {op}" in worked for op in operands), (operands, passage)


@pytest.mark.parametrize(("question", "passage"), [
    ("5 of us on personal, how much a year", PERSONAL),  # Personal is priced per account, not per person
    ("how much is team per user a year", TEAM),  # the figure itself, no sum
    ("charity with 10 staff, what's team a year", TEAM),  # a discount the full price does not state
    ("10 staff on team, what's the yearly cost", NONPROFIT),  # a discount the question does not ask for
    ("charity with 10 staff, what's team a year", STUDENT),  # another discount
    ("5 users on team yearly, what's the total with VAT in euros", TEAM),  # tax and currency
    ("5 users on team plus the extra storage add-on, total a month", TEAM),
    ("5 users, how much a year", f"{TEAM}\n{PERSONAL}"),  # which plan is meant
    # Counts the figures cannot take, or two of them:
    ("Team for twenty-five users a month?", TEAM),
    ("Team for 10 users for 2.5 years, total?", TEAM),
    ("we're 3 founders and 12 employees, what's team per month", TEAM),
    ("5 users on team and we're adding 3 more, monthly cost?", TEAM),
    ("how much more is team a month if we get 2 more seats", TEAM),  # one billing period: something added
    ("how much extra would team cost per year for 6 people", TEAM),
    ("team for half a dozen people, how much a month", TEAM),
    # Billed monthly, asked per year: the yearly price is not what they pay.
    ("We pay monthly for Team with 10 users, how much is that a year?", TEAM),
    # A discount without whose, and a plan the line does not name:
    ("Is there a discount for paying annually? How much is Team for 10 users per year then?", NONPROFIT),
    ("What does it cost to add 2 TB of storage to Personal for 12 months?", PERSONAL),
    # A saving with a discount named may be against the full price ("student price instead of the $8 I pay"):
    ("paying $8 a month for personal now. with the student price paid yearly how much do i save", STUDENT),
])
def test_a_sum_the_figures_do_not_settle_is_not_worked(question, passage):
    assert worked_sum(question, passage, PLANS) == ""


def test_a_line_is_worked_only_for_the_plan_it_names():
    team_article = "\n".join(u for u in article_units(ARTICLES["team-setup-invite"]) if "Each member gets" in u)
    assert "8 TB" in worked_sum("4 of us on team, how much storage in total", team_article, PLANS)
    assert worked_sum("How much storage do 10 users get on Enterprise?", team_article, PLANS) == ""


def test_a_plan_and_its_storage_add_on_are_worked_together_from_both_lines():
    """A question about storage on top of Personal gets Personal's price line and the add-on's line, quoted together,
    and the month summed from them; the price list's line alone left out the add-on."""
    from types import SimpleNamespace

    from chatbot.figures import add_on_figures
    from chatbot.shown import offer

    articles = [SimpleNamespace(id=key, title=text.split("\n", 1)[0], body=text.split("\n", 1)[1])
                for key, text in ARTICLES.items()]
    asked = "im on personal and just hit my 1tb. if i add the extra storage thing what am i paying per month total"
    assert needs_sum(asked) and needs_sum("I'm on Personal and 1 TB isn't enough, I need 2 TB. what's my monthly bill?")
    figures = add_on_figures(asked, articles)
    assert figures.worked == ("Personal: $8 per month + the 1 TB storage add-on at $5 per month = $13 per month, for "
                              "1 TB + 1 TB = 2 TB of storage.")
    assert "$8 per month" in figures.text and "add-on for $5 per month" in figures.text  # every operand quoted
    shown = offer(figures, "", cut=False)
    assert "help articles" in shown and figures.also in shown and figures.title in shown
    unnamed = "if i add the extra storage thing what will my monthly bill be, before tax?"  # no plan named
    assert add_on_figures(unnamed, articles) is None
    for unsettled in ("on personal, if i add extra storage what do i pay a year?", "on personal, need 4 tb, how much?",
                      "on personal, 3 of us, if we add extra storage what's the monthly total?"):
        figures = add_on_figures(unsettled, articles)
        assert figures.worked == "" and "add-on for $5 per month" in figures.text, unsettled  # the figures alone
    assert add_on_figures("we're on team, if we add extra storage how much a month?", articles) is None  # Personal's


def test_a_follow_up_that_changes_a_term_of_a_sum_is_worked_with_it_changed():
    """"and monthly?" after "what would 5 of us pay a year on team" showed the price list and no sum: the count and
    the plan are carried over from the message before, the period is the follow-up's."""
    from chatbot.sums import carried_sum

    before = "what would 5 of us pay a year on team"
    for follow_up, worked in (("and monthly?", "Team: 5 users × $12 per user per month = $60 per month."),
                              ("and for 7?", "Team: 7 users × $120 per user per year = $840 per year."),
                              ("what if we're 9", "Team: 9 users × $120 per user per year = $1,080 per year.")):
        assert worked_sum(carried_sum(before, follow_up, PLANS), TEAM, PLANS) == worked, follow_up
    assert worked_sum(carried_sum(before, "and on personal?", PLANS), PERSONAL, PLANS) == ""  # not priced per user
    for unchanged in ("is that before tax?", "and with the nonprofit discount?", "ok thanks"):
        assert carried_sum(before, unchanged, PLANS) == "", unchanged
    assert carried_sum("how do i share a folder", "and monthly?", PLANS) == ""  # no sum before it
    assert carried_sum(before, "and monthly, in euros?", PLANS).endswith("in euros?")  # what worked_sum refuses
    assert worked_sum(carried_sum(before, "and monthly, in euros?", PLANS), TEAM, PLANS) == ""
