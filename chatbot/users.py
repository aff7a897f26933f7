"""Manage staff accounts from the command line; every change lands in the audit log as `cli:<OS user>`.

    python -m chatbot.users add NAME --role admin        # asks for the password twice
    echo "$PW" | python -m chatbot.users add NAME --password-stdin
    python -m chatbot.users reset NAME | role NAME agent | remove NAME | list

The database is the app's: --data-dir and --db-url default to CHATBOT_DATA_DIR and CHATBOT_DB_URL, read here
because this command runs on its own, without app.py.
"""

import argparse
import getpass
import os
import sys

from cache import StaffStore

from .accounts import ROLES, Accounts
from .prompt import InputError


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    store = StaffStore.open(args.data_dir, args.db_url)
    accounts, actor = Accounts(store), f"cli:{getpass.getuser()}"
    try:
        if args.command == "list":
            for user in accounts.list():
                print(f"{user.name}\t{user.role}\tcreated {user.created_at:%Y-%m-%d %H:%M} UTC")
        elif args.command == "add":
            accounts.add(args.name, args.role, _password(args.password_stdin), actor)
            print(f"added {args.role} {args.name}")
        elif args.command == "reset":
            accounts.reset_password(args.name, _password(args.password_stdin), actor)
            print(f"new password set for {args.name}")
        elif args.command == "role":
            accounts.set_role(args.name, args.role, actor)
            print(f"{args.name} is now {args.role}")
        elif args.command == "remove":
            accounts.remove(args.name, actor)
            print(f"removed {args.name}")
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        store.close()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m chatbot.users", description="Manage helpdesk staff accounts.")
    parser.add_argument("--data-dir", default=os.environ.get("CHATBOT_DATA_DIR", "var"))
    parser.add_argument("--db-url", default=os.environ.get("CHATBOT_DB_URL") or None)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list accounts and roles")
    for name, text in (("add", "add an account"), ("reset", "set a new password")):
        command = commands.add_parser(name, help=text)
        command.add_argument("name")
        command.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
        if name == "add":
            command.add_argument("--role", choices=ROLES, default="agent")
    role = commands.add_parser("role", help="change an account's role")
    role.add_argument("name")
    role.add_argument("role", choices=ROLES)
    commands.add_parser("remove", help="remove an account").add_argument("name")
    return parser


def _password(from_stdin: bool) -> str:
    """One line of stdin when asked or piped; otherwise typed twice without echo."""
    if from_stdin or not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    password = getpass.getpass("Password: ")
    if getpass.getpass("Again: ") != password:
        raise InputError("the two passwords differ")
    return password


if __name__ == "__main__":
    sys.exit(main())
