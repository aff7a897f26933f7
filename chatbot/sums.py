"""A sum worked from the help centre's own figures: seats times a price per user, storage per user times seats, or
the saving of a year billed yearly against twelve months. Every operand is a figure of the quoted passage and every
step is written out, so the customer can check it against the text quoted under it. Anything the figures cannot
settle (a discount, tax, another currency, an app store's price, two plans that could be meant) is not worked:
the customer gets the figures alone, as before."""

import re
from dataclasses import dataclass

from .passages import article_units, list_label

_WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
          "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20}
# A whole count, not the tail of "2.5", "twenty-five" or "100%".
_COUNT = (r"(?<![\w.,-])(\d{1,3}(?:,\d{3})+|\d{1,6}|" + "|".join(_WORDS) + r")"
          r"(?![\w%]|\.\d|-(?:\d|one|two|three|four|five|six|seven|eight|nine))")
_USERS = re.compile(rf"{_COUNT}\s+(?:people|ppl|persons?|users?|seats?|members?|employees|staff|colleagues|"
                    rf"licen[cs]es?|of us|accounts|founders?|partners?|owners?|admins?|managers?|designers?|"
                    rf"developers?|engineers?|interns?|contractors?|freelancers?|volunteers?|guys|folks)\b"
                    rf"|\bteam of {_COUNT}|{_COUNT}[- ]person\b|\bwe(?:'re| are) {_COUNT}"
                    rf"|\b(?:just|only|for) us {_COUNT}(?! (?:months?|years?|times?|more|extra|tb|gb)\b)", re.I)
# Two people named as the customer and one other ("me and my business partner").
_PAIR = re.compile(r"\b(?:me|i) and my (?:\w+ )?(?:partner|wife|husband|cofounder|co-founder|colleague|co-?worker|"
                   r"friend|brother|sister|boss|assistant|associate)\b", re.I)
_MONTHS = re.compile(rf"{_COUNT}\s+months?\b", re.I)
_YEARS = re.compile(rf"{_COUNT}\s+years?\b", re.I)
_YEARLY = re.compile(r"\b(?:year|years|yearly|annual|annually|yr)\b", re.I)
_MONTHLY = re.compile(r"\b(?:month|months|monthly|mo)\b", re.I)
_COMPARED = re.compile(r"\b(?:versus|vs\.?|compared?|or)\b", re.I)
_SAVING = re.compile(r"\bsav(?:e|es|ing|ings)\b|\bcheaper\b|\bdifference\b", re.I)
# "How much more" is a saving asked the other way only with both billing periods said ("if i pay monthly instead how
# much more is that over the year"); with one ("how much extra would team cost per year for 6") it adds something.
_MORE = re.compile(r"\bhow much (?:more|extra)\b|\bmore expensive\b|\bpricier\b", re.I)
_STORAGE = re.compile(r"\b(?:storage|space|tb|gb|terabytes?|gigabytes?)\b", re.I)
_MONEY = re.compile(r"\$|\b(?:cost|costs|price|pay|paying|bill|spend|charged?|dollars|save|saving)\b", re.I)
# What changes a price in ways a plan's figures do not state, or a count they cannot take ("adding 3 more", "half a
# year", "2 companies with 5 users each"): the sum is left to the figures.
_OTHER_PRICE = r"coupon|promo\w*|tax|vat|gst|ios|android|iphone|app ?store|google play|euros?|eur|gbp|pounds?"
_UNSETTLED = re.compile(rf"\b(?:{_OTHER_PRICE}|"
                        r"cad|aud|usd|canadian|australian|currency|exchange|refund\w*|prorat\w*|"
                        r"credit\w*|add|adding|added|add-?on|extra|trial|back|more|fewer|less|drop\w*|remov\w*|"
                        r"leav\w*|half|quarter|each(?!\s+(?:month|year))|dozen)\b|[£€]"
                        r"|\d\.\d+\s*(?:years?|months?)\b", re.I)
# ... and what an add-on's sum cannot take: a discount, another currency, tax, several add-ons.
_UNSETTLED_ADD_ON = re.compile(rf"\b(?:{_OTHER_PRICE}|discount\w*|students?|nonprofit|two add-?ons|[3-9]\s?tb|"
                               r"[2-9] (?:more|extra) (?:tb|terabytes))\b|[£€]", re.I)
# A discount the question names without saying whose: the plans' lines do not settle it.
_SOME_DISCOUNT = re.compile(r"\b(?:discount\w*|deal|offer)\b|% off|percent off", re.I)
# Who a discounted price is for, as a question says it and as the line that states the price says it. A question
# that names one is worked only from a line that states that discount, and a discount line only for one that names
# it.
QUALIFIERS = (
    (re.compile(r"\bnon-?profits?\b|\bcharit(?:y|ies|able)\b|\bngo\b", re.I), re.compile(r"\bnonprofits?\b", re.I)),
    (re.compile(r"\b(?:students?|teachers?|school|college|universit\w*|education\w*|academic)\b", re.I),
     re.compile(r"\b(?:students?|teachers?)\b", re.I)),
)
_DISCOUNTED = re.compile(r"% off|\bdiscount", re.I)  # a line that states a discounted price
_PRICE = re.compile(r"\$(\d[\d,]*(?:\.\d+)?) per (?:(user|person) per )?(month|year)\b")
_SIZES = (re.compile(r"\b(\d+(?:\.\d+)?) (TB|GB) of (?:pooled )?storage per user\b"),
          re.compile(r"\beach (?:member|user) gets (\d+(?:\.\d+)?) (TB|GB)\b", re.I))
_MINIMUM = re.compile(r"\bminimum (?:of )?(\d+) users\b")
# Storage bought on top of a plan, as a line states it ("Personal users can add a 1 TB storage add-on for $5 per
# month") and as a question asks for it ("if i add the extra storage", "i need about 2tb, what would that cost").
_ADD_ON = re.compile(r"\b([A-Z]\w+) users can add an? (\d+(?:\.\d+)?) (TB|GB) storage add-on for "
                     r"\$(\d+(?:\.\d+)?) per month\b")
_ASKS_ADD_ON = re.compile(r"\b(?:add-?on|extra|more|additional|add|adding|buy)\b.{0,30}\b(?:storage|space|room|"
                          r"(?:\d+(?:\.\d+)?\s?)?(?:tb|terabytes?))\b"
                          r"|\b(?:need|want|get)\b.{0,25}\b\d+(?:\.\d+)?\s?(?:tb|terabytes?)\b", re.I | re.S)
_BEFORE_TAX = re.compile(r"\b(?:before|excluding|without|not including|pre-?)\s?(?:sales )?(?:tax|vat)\b", re.I)
_PLAN_SIZE = re.compile(r"\b(\d+(?:\.\d+)?) (TB|GB) of storage\b")


@dataclass(frozen=True)
class Rate:
    """A price ("$120 per user per year") or a size ("2 TB of pooled storage per user") as an article states it."""

    amount: float
    per_user: bool
    period: str  # "month", "year", or "" for a size
    unit: str  # "$", "TB" or "GB"


@dataclass(frozen=True)
class PricedLine:
    """One passage line's figures: what it is called (a list item's label) and what it states."""

    label: str
    prices: list[Rate]
    sizes: list[Rate]
    minimum_users: int


def worked_sum(question: str, passage: str, plans: frozenset[str] = frozenset()) -> str:
    """The sum `question` asks, worked from the figures of `passage`, or "" when they cannot settle it. `plans`:
    the help centre's plan names; a line is used only when it names every plan the question names."""
    more_by_the_month = asks_more_by_the_month(question)
    unsettled = _UNSETTLED.search(_MORE.sub(" ", question) if more_by_the_month else question)
    if unsettled or (_SOME_DISCOUNT.search(question) and not names_a_discount(question)):
        return ""
    named = plans & word_set(question)
    lines = [line for unit in article_units(passage) if qualified_alike(question, unit) and named <= word_set(unit)
             for line in [priced_line(unit)] if line.prices or line.sizes]
    users, months, years = users_asked(question), _count(_MONTHS, question), _count(_YEARS, question)
    if users < 0 or months < 0 or years < 0:
        return ""  # two counts of one kind ("3 founders and 12 employees"): which to take is not said
    if _STORAGE.search(question) and not _MONEY.search(question):
        return _storage_sum(_one(line for line in lines if line.sizes), users)
    line = _one(line for line in lines if line.prices)
    if line is None:
        return ""
    if _SAVING.search(question) or more_by_the_month:
        # With a discount named, a saving may be against the full price, not the monthly one: not worked.
        return "" if names_a_discount(question) else _saving_sum(line, users)
    return _cost_sum(line, users, months, years, _asked_period(question, months, years))


# A count said bare in a follow-up of a sum ("and for 7?", "what if we're 9"): a number of users.
_BARE_COUNT = re.compile(rf"\b(?:for|with|if we(?:'re| are)|if there(?:'re| are)|we(?:'re| are)) (?:only |just )?"
                         rf"{_COUNT}\s*\??\s*$", re.I)


def carried_sum(previous: str, follow_up: str, plans: frozenset[str]) -> str:
    """The sum a follow-up asks by changing a term of the customer's sum before it, written out whole, or "":
    "and monthly?" after "what would 5 of us pay a year on team" is "how much would 5 users on team cost per
    month?", and "and for 7?" is 7 users a year on team. Only where the message before priced a number of users and
    the follow-up changes the period, the count or the plan, one at most of each; the follow-up's own words follow
    the sum, so what worked_sum refuses in them (a discount, tax, an app store) is still refused."""
    users = users_asked(previous)
    said_users = users_asked(follow_up) or _single(_counts(_BARE_COUNT, follow_up))
    said_period = _asked_period(follow_up, 0, 0)
    said_plans = plans & word_set(follow_up)
    if users <= 0 or said_users < 0 or said_period == "both" or len(said_plans) > 1:
        return ""
    if not (said_users or said_period or said_plans):
        return ""
    period = said_period or _asked_period(previous, 0, 0)
    named = said_plans or plans & word_set(previous)
    if period == "both" or len(named) > 1:
        return ""
    on = f" on {next(iter(named))}" if named else ""
    per = f" per {period}" if period else ""
    return f"how much would {said_users or users} users{on} cost{per}? {follow_up}"


def asks_for_add_on(question: str) -> bool:
    """Whether the question asks for storage on top of its plan ("if i add the extra terabyte thing")."""
    return bool(_ASKS_ADD_ON.search(question))


@dataclass(frozen=True)
class AddOn:
    """A storage add-on as a line prices it: "Personal users can add a 1 TB storage add-on for $5 per month"."""

    plan: str
    size: float
    unit: str  # "TB" or "GB"
    monthly: float


def add_on_line(unit: str) -> AddOn | None:
    """The storage add-on a line prices, or None."""
    found = _ADD_ON.search(unit)
    return AddOn(found.group(1), _amount(found.group(2)), found.group(3), _amount(found.group(4))) if found else None


def add_on_sum(question: str, plan_unit: str, added: AddOn) -> str:
    """A month of the plan and its storage add-on, and the storage they hold together, from the plan's line ("2.
    Personal: $8 per month ... 1 TB of storage") and the add-on's; "" unless the question asks per month (or says
    no period), counts no users, and both lines state a size in the same unit."""
    monthly = [rate for rate in priced_line(plan_unit).prices if rate.period == "month" and not rate.per_user]
    size = _PLAN_SIZE.search(plan_unit)
    unsettled = _UNSETTLED_ADD_ON.search(_BEFORE_TAX.sub("", question))
    if (len(monthly) != 1 or size is None or size.group(2) != added.unit or users_asked(question)
            or unsettled or _asked_period(question, 0, 0) not in ("", "month")):
        return ""
    own, unit, plan_price = _amount(size.group(1)), added.unit, monthly[0].amount
    return (f"{added.plan}: {_money(plan_price)} per month + the {_number(added.size)} {unit} storage add-on at "
            f"{_money(added.monthly)} per month = {_money(plan_price + added.monthly)} per month, for {_number(own)} "
            f"{unit} + {_number(added.size)} {unit} = {_number(own + added.size)} {unit} of storage.")


def users_asked(question: str) -> int:
    """How many users the question prices ("5 of us", "a 6 person office", "me and my partner"), 0 for none, -1
    for more than one count."""
    return _single(_counts(_USERS, question) | ({2} if _PAIR.search(question) else set()))


def asks_more_by_the_month(question: str) -> bool:
    """Whether the question asks how much more a year costs billed monthly than yearly."""
    return bool(_MORE.search(question) and _MONTHLY.search(question) and _YEARLY.search(question))


def asks_a_count(question: str) -> bool:
    """Whether the question names a number of users, months or years (a sum's operand)."""
    return bool(users_asked(question) or _counts(_MONTHS, question) or _counts(_YEARS, question))


def names_a_discount(question: str) -> bool:
    return any(asked.search(question) for asked, _ in QUALIFIERS)


def qualified_alike(question: str, unit: str) -> bool:
    """Whether the line states the price for whom the question asks: the discount it names, or the full price when
    it names none."""
    if any(asked.search(question) and not stated.search(unit) for asked, stated in QUALIFIERS):
        return False
    return names_a_discount(question) or not _DISCOUNTED.search(unit)


def priced_line(unit: str) -> PricedLine:
    minimum = _MINIMUM.search(unit)
    return PricedLine(
        list_label(unit),
        [Rate(_amount(m.group(1)), bool(m.group(2)), m.group(3), "$") for m in _PRICE.finditer(unit)],
        [Rate(_amount(m.group(1)), True, "", m.group(2)) for size in _SIZES for m in size.finditer(unit)],
        int(minimum.group(1)) if minimum else 0,
    )


def _cost_sum(line: PricedLine, users: int, months: int, years: int, period: str) -> str:
    """Seats (or one account) times the price for the period asked; both periods when none is asked."""
    if period == "both":
        return ""  # "billed monthly, how much a year": the yearly price is not what they pay
    periods = [period] if period else ["month", "year"]
    rates = [rate for rate in line.prices if rate.period in periods]
    # Seats priced per account ("5 of us on Personal"), or a price per user asked without a number of users (the
    # figure itself), is no sum.
    if not rates or {rate.per_user for rate in rates} != {bool(users)}:
        return ""
    seats, steps = _seats(line, users)
    for rate in rates:
        times = (months if rate.period == "month" else years) or 1
        factors = [f"{seats:,} users"] * bool(seats) + [f"{times} {rate.period}s"] * (times > 1)
        if not factors:
            continue  # nothing to multiply: the figure itself
        total = rate.amount * (seats or 1) * times
        per = f"per {rate.period}" if times == 1 else f"for {times} {rate.period}s"
        steps.append(f"{' × '.join([*factors, _money(rate.amount) + _per(rate)])} = {_money(total)} {per}.")
    return _labelled(line, " ".join(steps)) if any("=" in step for step in steps) else ""


def _saving_sum(line: PricedLine, users: int) -> str:
    """Twelve months billed monthly against one year billed yearly, per user and for the seats asked."""
    monthly = [rate for rate in line.prices if rate.period == "month"]
    yearly = [rate for rate in line.prices if rate.period == "year"]
    if len(monthly) != 1 or len(yearly) != 1 or monthly[0].per_user != yearly[0].per_user:
        return ""
    month, year = monthly[0], yearly[0]
    saved = 12 * month.amount - year.amount
    who = " per user" if month.per_user else ""
    seats, steps = _seats(line, users)
    steps.append(f"12 × {_money(month.amount)}{_per(month)} = {_money(12 * month.amount)}{who} a year billed "
                 f"monthly, against {_money(year.amount)}{who} billed yearly: {_money(saved)}{who} a year less.")
    if month.per_user and seats > 1:
        steps.append(f"For {seats:,} users: {seats:,} × {_money(saved)} = {_money(seats * saved)} a year less.")
    return _labelled(line, " ".join(steps))


def _storage_sum(line: PricedLine | None, users: int) -> str:
    if line is None or not users or len(line.sizes) != 1:
        return ""
    size = line.sizes[0]
    seats, steps = _seats(line, users)
    total = _number(size.amount * seats)
    steps.append(f"{seats:,} users × {_number(size.amount)} {size.unit} per user = {total} {size.unit} of storage in "
                 "all.")
    return _labelled(line, " ".join(steps))


def _seats(line: PricedLine, users: int) -> tuple[int, list[str]]:
    """The seats billed for `users` (none asked: 0), and the step that says so when a plan's minimum raises them."""
    seats = max(users, line.minimum_users) if users else 0
    billed = f"the minimum is {seats:,} users, so {users:,} {'is' if users == 1 else 'are'} billed as {seats:,}."
    return seats, [billed] if seats > users else []


def _labelled(line: PricedLine, steps: str) -> str:
    return f"{line.label}: {steps}" if line.label else steps[:1].upper() + steps[1:]


def _one(lines) -> PricedLine | None:
    """The only line that states the figures; two could be meant ("Personal" and "Team"), so neither is."""
    found = list(lines)
    return found[0] if len(found) == 1 else None


def _count(pattern: re.Pattern, question: str) -> int:
    return _single(_counts(pattern, question))


def _single(counts: set[int]) -> int:
    """The one count found, 0 for none, -1 for several."""
    return next(iter(counts)) if len(counts) == 1 else -1 if counts else 0


def _counts(pattern: re.Pattern, question: str) -> set[int]:
    words = (next(group for group in found.groups() if group).replace(",", "") for found in pattern.finditer(question))
    return {int(word) if word.isdigit() else _WORDS[word.lower()] for word in words}


def word_set(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def _asked_period(question: str, months: int, years: int) -> str:
    yearly, monthly = bool(years or _YEARLY.search(question)), bool(months or _MONTHLY.search(question))
    if yearly and monthly:
        return "" if _COMPARED.search(question) else "both"  # both compared, or one said of the other
    return "year" if yearly else "month" if monthly else ""


def _amount(text: str) -> float:
    return float(text.replace(",", ""))


def _per(rate: Rate) -> str:
    return f" per user per {rate.period}" if rate.per_user else f" per {rate.period}"


def _money(amount: float) -> str:
    return f"${amount:,.0f}" if amount == int(amount) else f"${amount:,.2f}"


def _number(amount: float) -> str:
    return f"{amount:,.0f}" if amount == int(amount) else f"{amount:,.1f}"
