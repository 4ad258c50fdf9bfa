"""Operator commands of issue 9: keys create/list/revoke, accounts show, subscriptions import/export."""
import codecs
import csv
import json

import pytest

from app import cli_operations
from app.services import importer
from conftest import Tenant, subscription_count


def _ok(runner, *args):
    result = runner.invoke(args=list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _fields(output):
    return dict(line.split(": ", 1) for line in output.strip().splitlines() if ": " in line)


# --- keys ---------------------------------------------------------------------------------------

def test_a_lost_key_is_replaced_then_revoked(app, runner, alice):
    created = json.loads(_ok(runner, "keys", "create", "--account", alice.account_id, "--name", "ops", "--json"))
    new = Tenant(app.test_client(), alice.account_id, created["api_key"])
    assert new.get("/account").status_code == 200
    listed = json.loads(_ok(runner, "keys", "list", "--account", alice.account_id, "--json"))
    assert [key["name"] for key in listed] == ["Default key", "ops"]
    assert listed[1]["key_hint"] == created["api_key"][-4:]
    assert "api_key" not in listed[0] and "key" not in listed[0]
    lost = listed[0]["id"]
    assert _ok(runner, "keys", "revoke", lost).strip() == f"revoked {lost} of {alice.account_id}"
    assert alice.get("/account").status_code == 401
    assert new.get("/account").status_code == 200
    assert created["api_key"] not in _ok(runner, "keys", "list", "--account", alice.account_id)


@pytest.mark.parametrize("args", [
    ["keys", "create", "--account", "acct_missing", "--name", "x"],
    ["keys", "create", "--account", "ALICE", "--name", ""],
    ["keys", "create", "--account", "ALICE", "--name", "x" * 101],
    ["keys", "create", "--account", "ALICE", "--name", "ops\nkey_forged"],
    ["keys", "list", "--account", "acct_missing"],
    ["keys", "revoke", "key_missing"],
])
def test_key_commands_refuse_bad_input_and_change_nothing(runner, alice, args):
    args = [alice.account_id if arg == "ALICE" else arg for arg in args]
    result = runner.invoke(args=args)
    assert result.exit_code != 0
    assert len(json.loads(_ok(runner, "keys", "list", "--account", alice.account_id, "--json"))) == 1


def test_the_last_key_cannot_be_revoked(runner, alice):
    [only] = json.loads(_ok(runner, "keys", "list", "--account", alice.account_id, "--json"))
    result = runner.invoke(args=["keys", "revoke", only["id"]])
    assert result.exit_code != 0 and "INVALID_STATE" in result.output
    assert alice.get("/account").status_code == 200


# --- accounts show --------------------------------------------------------------------------------

def test_accounts_show(runner, alice):
    alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane-doe"})
    shown = json.loads(_ok(runner, "accounts", "show", alice.account_id, "--json"))
    assert shown["id"] == alice.account_id and shown["name"] == "Alice Inc"
    assert (shown["subscription_count"], shown["subscription_limit"], shown["api_keys"]) == (1, 100, 1)
    assert shown["webhook_endpoint"] is None
    alice.post("/webhooks/configure", json={"endpoint_url": "https://93.184.216.34/hook"})
    text = _fields(_ok(runner, "accounts", "show", alice.account_id))
    assert text["webhook_endpoint"] == "https://93.184.216.34/hook" and text["webhook_active"] == "yes"
    assert text["subscription_limit"] == "100"
    assert "whsec_" not in _ok(runner, "accounts", "show", alice.account_id)
    assert runner.invoke(args=["accounts", "show", "acct_missing"]).exit_code != 0


def test_accounts_show_says_flags_and_no_limit_in_words(runner, alice):
    """Its text printed Python's `webhook_active: True` and, for a tier without a cap, `subscription_limit:` with
    nothing after it, where `accounts list` says `unlimited` (walk)."""
    alice.post("/webhooks/configure", json={"endpoint_url": "https://93.184.216.34/hook"})
    assert alice.put("/webhooks/configure", json={"is_active": False}).status_code == 200
    _ok(runner, "accounts", "set-tier", alice.account_id, "enterprise")
    text = _fields(_ok(runner, "accounts", "show", alice.account_id))
    assert (text["webhook_active"], text["subscription_limit"]) == ("no", "unlimited")
    shown = json.loads(_ok(runner, "accounts", "show", alice.account_id, "--json"))
    assert (shown["webhook_active"], shown["subscription_limit"]) == (False, None)


# --- subscriptions import -------------------------------------------------------------------------

CRM_ROWS = [
    ("Jane", "https://uk.linkedin.com/in/jane-doe", "Ann", "A"),
    ("Acme", "linkedin.com/company/acme/about/", "Bob", "B"),
    ("Joe", "www.linkedin.com/in/joe/details/experience/", "Ann", ""),
    ("Mob", "https://m.linkedin.com/mwlite/in/mo-b", "Cy", "C"),
    ("Elsewhere", "https://example.com/in/x", "Cy", "C"),
    ("Twice", "https://www.linkedin.com/in/jane-doe/", "Ann", "A"),
    ("Blank", "", "Ann", "A"),
]


def _write_csv(path, header, rows, delimiter=","):
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


@pytest.fixture
def crm_file(tmp_path):
    return _write_csv(tmp_path / "crm.csv", ["Name", "LinkedIn Profile", "Owner", "Segment"], CRM_ROWS)


def _rejected(path, delimiter=","):
    with open(path, newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file, delimiter=delimiter))


def test_import_a_crm_export_then_re_run_it(runner, alice, crm_file, tmp_path):
    output = _ok(runner, "subscriptions", "import", crm_file, "--account", alice.account_id,
                 "--metadata", "Owner,Segment")
    assert "imported 7/7 rows" in output  # plain counts when not on a terminal
    assert "rows=7 created=4 already_present=1 rejected=2" in output
    rejected = _rejected(tmp_path / "crm.rejected.csv")
    assert [row["Name"] for row in rejected] == ["Elsewhere", "Blank"]
    assert "host must be" in rejected[0]["reason"] and "empty" in rejected[1]["reason"]
    exported = _ok(runner, "subscriptions", "export", "--account", alice.account_id, "--format", "json")
    items = {item["network_id"]: item for item in json.loads(exported)["data"]}
    assert set(items) == {"jane-doe", "acme", "joe", "mo-b"}
    assert items["acme"]["entity_type"] == "company"
    assert items["mo-b"]["network_url"] == "https://www.linkedin.com/in/mo-b"
    assert items["jane-doe"]["custom_metadata"] == {"Owner": "Ann", "Segment": "A"}
    assert items["joe"]["custom_metadata"] == {"Owner": "Ann"}

    again = _ok(runner, "subscriptions", "import", crm_file, "--account", alice.account_id)
    assert "rows=7 created=0 already_present=5 rejected=2" in again
    assert subscription_count(alice.account_id) == 4


def test_a_re_run_with_no_row_rejected_removes_the_earlier_rejected_file(runner, alice, crm_file, tmp_path):
    """The earlier run's crm.rejected.csv stayed beside a file whose rows were all imported since: its rows read as
    still rejected."""
    _ok(runner, "subscriptions", "import", crm_file, "--account", alice.account_id)
    assert (tmp_path / "crm.rejected.csv").exists()
    fixed = _write_csv(tmp_path / "crm.csv", ["Name", "LinkedIn Profile", "Owner", "Segment"],
                       [row for row in CRM_ROWS if row[0] not in ("Elsewhere", "Blank")])
    output = _ok(runner, "subscriptions", "import", fixed, "--account", alice.account_id)
    assert "rejected=0" in output and f"no row rejected: removed the earlier {tmp_path / 'crm.rejected.csv'}" in output
    assert not (tmp_path / "crm.rejected.csv").exists()


def test_a_dry_run_keeps_the_rejected_file_and_the_import_is_never_its_own_report(runner, alice, crm_file, tmp_path):
    _ok(runner, "subscriptions", "import", crm_file, "--account", alice.account_id)
    fixed = _write_csv(tmp_path / "fixed.csv", ["Name", "LinkedIn Profile"], [("Jane", "in/jane-doe")])
    _ok(runner, "subscriptions", "import", fixed, "--account", alice.account_id, "--dry-run",
        "--rejected", str(tmp_path / "crm.rejected.csv"))
    assert (tmp_path / "crm.rejected.csv").exists()  # a dry run describes nothing that happened
    result = runner.invoke(args=["subscriptions", "import", crm_file, "--account", alice.account_id,
                                 "--rejected", crm_file])
    assert result.exit_code == 2 and "written over the file imported" in result.output
    assert len(_rejected(crm_file)) == len(CRM_ROWS)


def test_a_dry_run_writes_its_rejected_rows_apart_from_the_real_runs(runner, alice, crm_file, tmp_path):
    """A dry run after fixing some rows wrote its own rejections over crm.rejected.csv: the real run's rows still
    to fix were lost."""
    _ok(runner, "subscriptions", "import", crm_file, "--account", alice.account_id)
    real_runs = (tmp_path / "crm.rejected.csv").read_bytes()
    _write_csv(tmp_path / "crm.csv", ["Name", "LinkedIn Profile", "Owner", "Segment"],
               [row for row in CRM_ROWS if row[0] != "Blank"])
    output = _ok(runner, "subscriptions", "import", crm_file, "--account", alice.account_id, "--dry-run")
    assert (tmp_path / "crm.rejected.csv").read_bytes() == real_runs
    assert f"rejected rows and their reasons: {tmp_path / 'crm.dry-run.rejected.csv'}" in output
    assert [row["Name"] for row in _rejected(tmp_path / "crm.dry-run.rejected.csv")] == ["Elsewhere"]


def test_a_row_with_cells_past_the_header_is_written_to_the_rejected_file_as_read(runner, alice, tmp_path):
    """Its cells past the header's were dropped from the rejected file: the row could not be fixed (the value holding
    the delimiter quoted) and imported again as it was."""
    (tmp_path / "crm.csv").write_text("url,owner\nhttps://www.linkedin.com/in/shifted,Acme, Inc,,\n"
                                      "https://example.com/in/x,Sam\n", encoding="utf-8")
    output = _ok(runner, "subscriptions", "import", str(tmp_path / "crm.csv"), "--account", alice.account_id)
    assert "rejected=2" in output
    with open(tmp_path / "crm.rejected.csv", newline="", encoding="utf-8") as file:
        header, shifted, other = csv.reader(file)
    assert header == ["url", "owner", "reason"]
    assert shifted[:3] == ["https://www.linkedin.com/in/shifted", "Acme", " Inc"] and len(shifted) == 4
    assert "1 more filled cells than the header has columns" in shifted[3]
    assert other[:2] == ["https://example.com/in/x", "Sam"] and "host must be" in other[2]


def test_dry_run_creates_nothing(runner, alice, crm_file):
    output = _ok(runner, "subscriptions", "import", crm_file, "--account", alice.account_id, "--dry-run")
    assert "would be created=4" in output
    assert subscription_count(alice.account_id) == 0


def test_a_dry_run_over_several_chunks_counts_as_the_real_run_does(runner, alice, tmp_path):
    """Each chunk of 100 rows was planned alone: the tier cap and the file's own repeats were missed across chunks
    (walk: a dry run said 142 would be created where the import created 92)."""
    for n in range(8):
        assert alice.post("/subscriptions", json={"entity_type": "contact", "network_id": f"kept-{n}"}).status_code \
            == 201
    path = _write_csv(tmp_path / "dd.csv", ["url"], [(f"https://www.linkedin.com/in/dd-{n}",)
                                                     for n in [*range(120), *range(30)]])
    counts = "rows=150 {}=92 already_present=30 rejected=28"
    assert counts.format("would be created") in _ok(runner, "subscriptions", "import", path, "--account",
                                                    alice.account_id, "--dry-run")
    assert subscription_count(alice.account_id) == 8
    assert counts.format("created") in _ok(runner, "subscriptions", "import", path, "--account", alice.account_id)


def test_the_report_has_an_outcome_per_row_in_file_order_and_a_dry_run_names_no_new_ids(alice):
    rows = [{"url": "https://www.linkedin.com/in/kim"}, {"url": ""}, {"url": "linkedin.com/in/kim"}]
    plan = importer.Plan("url")
    dry = importer.import_rows(alice.account_id, rows, plan, cli_operations._load_item, dry_run=True)
    assert [(o.row, o.result, o.subscription_id) for o in dry.outcomes] == [(1, "created", None),
                                                                            (2, "refused", None),
                                                                            (3, "present", None)]  # none made
    report = importer.import_rows(alice.account_id, rows, plan, cli_operations._load_item)
    kim, blank, again = report.outcomes
    assert kim.result == "created" and kim.subscription_id.startswith("sub_")
    assert (blank.result, blank.code, blank.values) == ("refused", "VALIDATION_ERROR", {"url": ""})
    assert (again.row, again.result, again.subscription_id) == (3, "present", kim.subscription_id)
    assert (report.rows, report.created, report.present, len(report.refused)) == (3, 1, 1, 1)


def test_column_type_column_and_semicolons(runner, alice, tmp_path):
    path = _write_csv(tmp_path / "ids.csv", ["kind", "handle", "crm"],
                      [("company", "acme", "1"), ("contact", "jane-doe", "2"), ("", "no-type", "3"),
                       ("robot", "r2-d2", "4")], delimiter=";")
    output = _ok(runner, "subscriptions", "import", path, "--account", alice.account_id, "--column", "handle",
                 "--type-column", "kind", "--metadata", "crm", "--rejected", str(tmp_path / "out.csv"))
    assert "created=2 already_present=0 rejected=2" in output
    reasons = {row["handle"]: row["reason"] for row in _rejected(tmp_path / "out.csv", ";")}  # the file's own
    assert "entity_type column" in reasons["no-type"]
    assert "entity_type" in reasons["r2-d2"]


def test_the_rejected_file_is_written_in_the_files_own_delimiter_and_bom(runner, alice, tmp_path):
    """Excel's *CSV UTF-8* of a `;` locale: the rejected rows came back `,`-separated and without the BOM, so Excel
    opened each in one column and read José as JosÃ©, which a fixed and saved file then imported (walk)."""
    path = tmp_path / "excel.csv"
    path.write_bytes(codecs.BOM_UTF8 + "Name;LinkedIn URL;Owner\r\nJosé;https://www.linkedin.com/in/jose-1;Zoë\r\n"
                     "Ana;https://www.example.com/in/ana;Zoë\r\n".encode())
    assert "created=1 already_present=0 rejected=1" in _ok(runner, "subscriptions", "import", str(path), "--account",
                                                           alice.account_id, "--metadata", "Owner")
    written = (tmp_path / "excel.rejected.csv").read_bytes()
    assert written.startswith(codecs.BOM_UTF8 + "Name;LinkedIn URL;Owner;reason\r\nAna;".encode())
    (tmp_path / "fixed.csv").write_bytes(written.replace(b"www.example.com", b"www.linkedin.com"))  # fixed, saved
    assert "created=1" in _ok(runner, "subscriptions", "import", str(tmp_path / "fixed.csv"), "--account",
                              alice.account_id, "--metadata", "Owner")
    owners = {item["network_id"]: item["custom_metadata"] for item in alice.get("/subscriptions").json["data"]}
    assert owners == {"jose-1": {"Owner": "Zoë"}, "ana": {"Owner": "Zoë"}}
    plain = _write_csv(tmp_path / "plain.csv", ["url"], [["https://www.example.com/in/x"]])
    _ok(runner, "subscriptions", "import", plain, "--account", alice.account_id)
    assert (tmp_path / "plain.rejected.csv").read_bytes().startswith(b"url,reason\r\n")  # no BOM where none was


def test_the_rejected_file_keeps_the_files_excel_separator_line(runner, alice, tmp_path):
    """A file naming its delimiter (`sep=;`) opens split in Excel whatever the system's list separator: its rejected
    rows came back `;`-separated without that line, each row in one column where the separator is `,`."""
    path = tmp_path / "sep.csv"
    path.write_bytes(b"sep=;\r\nurl;owner\r\nhttps://www.linkedin.com/in/sep-one;Ann\r\n"
                     b"https://example.com/in/bo-x;Bo\r\n")
    assert "created=1 already_present=0 rejected=1" in _ok(runner, "subscriptions", "import", str(path), "--account",
                                                           alice.account_id, "--metadata", "owner")
    written = (tmp_path / "sep.rejected.csv").read_bytes().decode()
    assert written.startswith("sep=;\r\nurl;owner;reason\r\nhttps://example.com/in/bo-x;Bo;")
    (tmp_path / "fixed.csv").write_bytes(written.replace("example.com", "www.linkedin.com").encode())
    assert "created=1" in _ok(runner, "subscriptions", "import", str(tmp_path / "fixed.csv"), "--account",
                              alice.account_id, "--metadata", "owner")


@pytest.mark.parametrize("where", ["missing/out.csv", "a-file/out.csv", "/proc/out.csv"])
def test_a_rejected_file_that_cannot_be_written_is_refused_before_importing(runner, alice, tmp_path, where):
    """It imported the rows, then failed with a traceback where it wrote their report (a folder that does not
    exist; walk: a path in /proc)."""
    path = _write_csv(tmp_path / "ids.csv", ["type", "linkedin_id"], [("contact", "jane-doe"), ("robot", "r2-d2")])
    (tmp_path / "a-file").write_text("")
    result = runner.invoke(args=["subscriptions", "import", path, "--account", alice.account_id,
                                 "--rejected", str(tmp_path / where)])
    assert result.exit_code == 2 and "cannot be written" in result.output and "Traceback" not in result.output
    assert alice.get("/subscriptions").json["data"] == []


def test_the_default_rejected_file_is_needed_only_when_a_row_is_rejected(runner, alice, tmp_path):
    """A clean import beside a place it cannot write went on (review: refusing it up front stopped imports from
    read-only folders); one with rejected rows says where they could not go and how to get them."""
    (tmp_path / "ids.rejected.csv").mkdir()  # the default path, not writable as a file
    clean = _write_csv(tmp_path / "ids.csv", ["type", "linkedin_id"], [("contact", "jane-doe")])
    assert "created=1" in _ok(runner, "subscriptions", "import", clean, "--account", alice.account_id)
    _write_csv(tmp_path / "ids.csv", ["type", "linkedin_id"], [("contact", "john-roe"), ("robot", "r2-d2")])
    result = runner.invoke(args=["subscriptions", "import", clean, "--account", alice.account_id])
    assert result.exit_code == 1 and "created=1" in result.output and "Traceback" not in result.output
    assert "could not be written to" in result.output and "--rejected PATH" in result.output


def test_checking_the_rejected_file_leaves_no_file_behind(runner, alice, tmp_path):
    path = _write_csv(tmp_path / "ids.csv", ["type", "linkedin_id"], [("contact", "jane-doe")])
    _ok(runner, "subscriptions", "import", path, "--account", alice.account_id, "--rejected", str(tmp_path / "r.csv"))
    assert not (tmp_path / "r.csv").exists() and not (tmp_path / "ids.rejected.csv").exists()


def test_rejected_rows_keep_the_order_of_the_file(runner, alice, tmp_path):
    # Rows refused by the import (a bare id without a type) used to come before rows refused by the bulk
    # rules (an unknown type) in the rejected file, whatever their order in the CRM export.
    path = _write_csv(tmp_path / "ids.csv", ["type", "linkedin_id"],
                      [("robot", "r2-d2"), ("contact", "jane-doe"), ("", "no-type"), ("person", "c-3po")])
    output = _ok(runner, "subscriptions", "import", path, "--account", alice.account_id)
    assert "created=1 already_present=0 rejected=3" in output
    assert [row["linkedin_id"] for row in _rejected(tmp_path / "ids.rejected.csv")] == ["r2-d2", "no-type", "c-3po"]


def test_chunks_of_one_hundred_and_the_tier_cap(runner, alice, tmp_path):
    rows = [(f"https://www.linkedin.com/in/person-{number}",) for number in range(130)]
    path = _write_csv(tmp_path / "many.csv", ["network_url"], rows)
    output = _ok(runner, "subscriptions", "import", path, "--account", alice.account_id)
    assert "imported 100/130 rows" in output and "imported 130/130 rows" in output
    assert "created=100 already_present=0 rejected=30" in output  # starter allows 100
    assert all(row["reason"].startswith("The starter tier allows 100")
               for row in _rejected(tmp_path / "many.rejected.csv"))


@pytest.mark.parametrize("header, extra", [
    (["name", "email"], []),                      # no URL or id column
    (["network_url"], ["--column", "missing"]),
    (["network_url"], ["--metadata", "nope"]),
    (["network_url"], ["--account", "acct_missing"]),
])
def test_import_exits_non_zero_when_it_cannot_do_its_job(runner, alice, tmp_path, header, extra):
    path = _write_csv(tmp_path / "bad.csv", header, [["https://www.linkedin.com/in/jane-doe"] * len(header)])
    account = [] if "--account" in extra else ["--account", alice.account_id]
    result = runner.invoke(args=["subscriptions", "import", path, *account, *extra])
    assert result.exit_code != 0
    assert subscription_count(alice.account_id) == 0


def test_a_file_without_a_column_of_profiles_is_told_to_name_one_or_choose_it_with_column(runner, alice, tmp_path):
    path = _write_csv(tmp_path / "bad.csv", ["name", "email"], [["Jane", "jane@example.com"]])
    result = runner.invoke(args=["subscriptions", "import", path, "--account", alice.account_id])
    assert result.exit_code == 1
    assert "rename the header of that column to url, or choose it with --column NAME" in result.output


def test_a_file_whose_lines_end_in_carriage_returns_alone_is_imported(runner, alice, tmp_path):
    """Excel's "CSV (Macintosh)" ends lines with CR alone: it was refused ("new-line character seen in unquoted field
    - do you need to open the file in universal-newline mode?"), where the dashboard imported the same file (walk)."""
    path = tmp_path / "mac.csv"
    path.write_bytes(b"Name,LinkedIn URL,Owner\rJane,https://www.linkedin.com/in/mac-jane,Sam\r"
                     b"Al,https://www.linkedin.com/in/mac-al,\"Kim\rLee\"\r")
    output = _ok(runner, "subscriptions", "import", str(path), "--account", alice.account_id, "--metadata", "Owner")
    assert "created=2" in output
    assert {row["network_id"]: row["custom_metadata"] for row in alice.get("/subscriptions").json["data"]} == {
        "mac-jane": {"Owner": "Sam"}, "mac-al": {"Owner": "Kim\nLee"}}


def test_rows_with_no_filled_cell_are_read_past_as_blank_lines_are(runner, alice, tmp_path):
    """A line of spaces, or of delimiters alone (a spreadsheet's formatted empty rows), was a rejected row, "The url
    cell is empty", and a rejected file written, where the dashboard read the same file without it (walk)."""
    path = tmp_path / "crm.csv"
    path.write_text("url,owner\nhttps://www.linkedin.com/in/blank-a,Sam\n   \n,\n , \n"
                    "https://www.linkedin.com/in/blank-b,\n,,\n", encoding="utf-8")
    output = _ok(runner, "subscriptions", "import", str(path), "--account", alice.account_id)
    assert "rows=2 created=2 already_present=0 rejected=0" in output
    assert not (tmp_path / "crm.rejected.csv").exists()


def test_lines_of_spaces_do_not_hide_the_files_delimiter(runner, alice, tmp_path):
    """The delimiter was sniffed with the lines of spaces in: their count of `;` (none) looked inconsistent, the file
    was read as one column, `url;owner`, every row rejected, where the dashboard, which left them out, read it."""
    path = tmp_path / "crm.csv"
    path.write_text("url;owner\nhttps://www.linkedin.com/in/spaced-a;Sam\n   \n   \n"
                    "https://www.linkedin.com/in/spaced-b;Kim\n", encoding="utf-8")
    output = _ok(runner, "subscriptions", "import", str(path), "--account", alice.account_id, "--metadata", "owner")
    assert "rows=2 created=2 already_present=0 rejected=0" in output
    assert {row["network_id"]: row["custom_metadata"] for row in alice.get("/subscriptions").json["data"]} == {
        "spaced-a": {"owner": "Sam"}, "spaced-b": {"owner": "Kim"}}


def test_a_file_that_is_a_bare_list_of_urls_is_imported_whole(runner, alice, tmp_path):
    """Its first URL was taken for the header: two of three imported, exit 0, nothing rejected (operability walk)."""
    path = tmp_path / "bare.csv"
    path.write_text("".join(f"https://www.linkedin.com/in/bare-{letter}\n" for letter in "abc"), encoding="utf-8-sig")
    assert "created=3" in _ok(runner, "subscriptions", "import", str(path), "--account", alice.account_id)
    assert sorted(row["network_id"] for row in alice.get("/subscriptions").json["data"]) == ["bare-a", "bare-b",
                                                                                             "bare-c"]


@pytest.mark.parametrize("first", ["https://www.linkedin.com/in/first", "linkedin.com/in/first"])
def test_a_file_whose_first_line_is_data_with_other_columns_is_refused_whole(runner, alice, tmp_path, first):
    """A URL without its scheme too, which the import accepts in a row (review)."""
    path = _write_csv(tmp_path / "no-header.csv", [first, "Acme"], [["https://www.linkedin.com/in/second", "Initech"]])
    result = runner.invoke(args=["subscriptions", "import", path, "--account", alice.account_id])
    assert result.exit_code != 0 and f"The first line holds a URL ({first})" in result.output
    assert subscription_count(alice.account_id) == 0


@pytest.mark.parametrize("header", ["LinkedIn/URL", "Profile URL / LinkedIn"])
def test_a_one_column_header_with_a_slash_is_a_header(runner, alice, tmp_path, header):
    """Read as a first URL of a bare list: the header became a rejected row, and `--column` could not name it
    (review)."""
    path = _write_csv(tmp_path / "one.csv", [header], [["https://www.linkedin.com/in/jane-doe"],
                                                       ["https://www.linkedin.com/in/john-roe"]])
    output = _ok(runner, "subscriptions", "import", path, "--account", alice.account_id, "--column", header)
    assert "rows=2 created=2 already_present=0 rejected=0" in output


@pytest.mark.parametrize("header, extra", [(["url", "url"], []), (["url", "owner", "owner"], ["--metadata", "owner"]),
                                           (["LinkedIn URL", "linkedin_url"], []), (["url", "Type", "type"], [])])
def test_a_column_to_import_named_twice_is_refused(runner, alice, tmp_path, header, extra):
    """Only the last of the two was read, silently (walk)."""
    path = _write_csv(tmp_path / "twice.csv", header, [["https://www.linkedin.com/in/jane-doe"] + ["x"] * (len(header)
                                                                                                           - 1)])
    result = runner.invoke(args=["subscriptions", "import", path, "--account", alice.account_id, *extra])
    assert result.exit_code != 0 and "columns named like" in result.output and "rename all but" in result.output
    assert subscription_count(alice.account_id) == 0


@pytest.mark.parametrize("header, extra, kept", [
    (["LinkedIn URL", "linkedin_url"], ["--column", "LinkedIn URL"], "jane-doe"),  # named exactly: that one
    (["url", "Имя", "Компания"], ["--metadata", "Компания"], "jane-doe"),  # non-Latin headers are distinct
])
def test_a_column_named_exactly_is_read_beside_others_alike(runner, alice, tmp_path, header, extra, kept):
    """Headers read alike by their letters and digits alone: any two in Cyrillic were one, and `--column 'LinkedIn
    URL'` read `linkedin_url` (review)."""
    row = ["https://www.linkedin.com/in/jane-doe", "https://www.linkedin.com/in/other", "Acme"][:len(header)]
    path = _write_csv(tmp_path / "alike.csv", header, [row])
    assert "created=1" in _ok(runner, "subscriptions", "import", path, "--account", alice.account_id, *extra)
    [created] = alice.get("/subscriptions").json["data"]
    assert created["network_id"] == kept
    if "--metadata" in extra:
        assert created["custom_metadata"] == {"Компания": "Acme"}


def test_a_column_named_twice_that_is_not_imported_is_no_concern(runner, alice, tmp_path):
    path = _write_csv(tmp_path / "notes.csv", ["url", "notes", "notes"],
                      [["https://www.linkedin.com/in/jane-doe", "a", "b"]])
    assert "created=1" in _ok(runner, "subscriptions", "import", path, "--account", alice.account_id)


def test_import_of_a_file_that_is_not_utf8_fails_cleanly(runner, alice, tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("network_url,owner\nhttps://www.linkedin.com/in/jane,Zoë\n".encode("latin-1"))
    result = runner.invoke(args=["subscriptions", "import", str(path), "--account", alice.account_id])
    assert result.exit_code != 0 and "UTF-8" in result.output
    # where: the byte and its line in the file (it was a position in the chunk read: operability walk)
    assert "(byte 54 is not, on line 2)" in result.output


@pytest.mark.parametrize("content, refusal", [
    (b"", "The file is empty"),
    (codecs.BOM_UTF8, "The file is empty"),
    (b"\n\n  \n", "The file is empty"),
])
def test_an_empty_file_is_refused_as_empty(runner, alice, tmp_path, content, refusal):
    """It was refused for want of a column of profile URLs, and told to name one (operability walk)."""
    path = tmp_path / "empty.csv"
    path.write_bytes(content)
    result = runner.invoke(args=["subscriptions", "import", str(path), "--account", alice.account_id])
    assert result.exit_code != 0 and refusal in result.output


@pytest.mark.parametrize("content", [
    "sep=;\nurl;owner\nhttps://www.linkedin.com/in/jane-doe;Ann\n",  # Excel's line naming the delimiter
    "\n \t\n\nurl,owner\nhttps://www.linkedin.com/in/jane-doe,Ann\n",  # blank lines before the header
    "SEP=,\r\nurl,owner\r\nhttps://www.linkedin.com/in/jane-doe,Ann\r\n",
    "sep=;\r\n\r\nurl;owner\r\nhttps://www.linkedin.com/in/jane-doe;Ann\r\n",  # a blank line after it: refused as empty
])
def test_an_excel_separator_line_or_blank_lines_before_the_header_are_read_past(runner, alice, tmp_path, content):
    """Both were refused as having no column of profile URLs (operability walk)."""
    path = tmp_path / "crm.csv"
    path.write_text(content, encoding="utf-8")
    assert "created=1" in _ok(runner, "subscriptions", "import", str(path), "--account", alice.account_id,
                              "--metadata", "owner")
    [created] = alice.get("/subscriptions").json["data"]
    assert created["network_id"] == "jane-doe" and created["custom_metadata"] == {"owner": "Ann"}


def test_import_of_a_field_beyond_the_csv_limit_names_the_row_and_imports_nothing(runner, alice, tmp_path):
    path = tmp_path / "huge.csv"
    path.write_text('network_url,note\nhttps://www.linkedin.com/in/jane,ok\nhttps://www.linkedin.com/in/al,"'
                    + "x" * 200_000 + '"\n', encoding="utf-8")
    result = runner.invoke(args=["subscriptions", "import", str(path), "--account", alice.account_id])
    assert result.exit_code != 0 and "cannot be read as CSV at row 2: field larger than field limit" in result.output
    assert alice.get("/subscriptions").json["pagination"]["total"] == 0


@pytest.mark.parametrize("content, where", [
    ('name,url\nJane,https://www.linkedin.com/in/jane-doe\nAl,"https://www.linkedin.com/in/al\n\n'
     'Bo,https://www.linkedin.com/in/bo\nCy,https://www.linkedin.com/in/cy\n', "row 2"),
    ('name,url\r\nJane,https://www.linkedin.com/in/jane-doe\r\n\r\nAl,https://www.linkedin.com/in/al,"note\r\n'
     'Bo,https://www.linkedin.com/in/bo\r\n', "row 3"),
    ('name,"url\nJane,https://www.linkedin.com/in/jane-doe\n', "its header"),
])
def test_a_quote_never_closed_is_refused_naming_its_row_and_imports_nothing(runner, alice, tmp_path, content, where):
    """The csv module read a stray quote's cell to the end of the file: the rows after it were in that one cell,
    neither imported nor counted (`rows=2 created=1 rejected=1`, exit 0), where the file held four (walk)."""
    path = tmp_path / "stray.csv"
    path.write_bytes(content.encode())
    result = runner.invoke(args=["subscriptions", "import", str(path), "--account", alice.account_id])
    assert result.exit_code != 0, result.output
    assert f"cannot be read as CSV: {where} opens a quoted cell" in result.output
    assert alice.get("/subscriptions").json["pagination"]["total"] == 0


def test_a_quoted_cell_over_several_lines_closed_at_the_end_is_read(runner, alice, tmp_path):
    path = tmp_path / "notes.csv"
    path.write_text('url,note\nhttps://www.linkedin.com/in/jane-doe,"two\n\nparagraphs"\n'
                    'https://www.linkedin.com/in/al,"last ""quoted""\nnote"\n', encoding="utf-8")
    assert "created=2" in _ok(runner, "subscriptions", "import", str(path), "--account", alice.account_id,
                              "--metadata", "note")


def test_a_terminal_gets_a_progress_bar(runner, alice, crm_file, monkeypatch):
    bars = []
    real = cli_operations.click.progressbar
    monkeypatch.setattr(cli_operations, "on_terminal", lambda: True)
    monkeypatch.setattr(cli_operations.click, "progressbar", lambda **kwargs: bars.append(kwargs) or real(**kwargs))
    output = _ok(runner, "subscriptions", "import", crm_file, "--account", alice.account_id)
    assert bars and bars[0]["length"] == 7
    assert "imported 7/7 rows" not in output


def test_column_detection_prefers_known_names():
    assert importer.find_id_column(["Name", "Website URL", "LinkedIn"]) == "LinkedIn"
    assert importer.find_id_column(["Name", "Person Linkedin Url"]) == "Person Linkedin Url"
    assert importer.find_id_column(["Company", "Profile URL"]) == "Profile URL"


def test_a_header_mentioning_linkedin_is_preferred_to_an_earlier_one_mentioning_url(runner, alice, tmp_path):
    """An export with "Company Website Url" before "Person Linkedin Url" (Apollo's) imported the websites, every row
    rejected as not a profile: the first header mentioning LinkedIn or URL was taken, whichever it mentioned (walk)."""
    assert importer.find_id_column(["Name", "Company Website Url", "Person Linkedin Url"]) == "Person Linkedin Url"
    assert importer.find_id_column(["Name", "Website Url", "Photo Url"]) == "Website Url"  # no LinkedIn: as before
    path = _write_csv(tmp_path / "apollo.csv", ["First Name", "Company Website Url", "Person Linkedin Url"],
                      [["Jane", "https://acme.com", "https://www.linkedin.com/in/apollo-jane"]])
    output = _ok(runner, "subscriptions", "import", path, "--account", alice.account_id)
    assert "created=1 already_present=0 rejected=0" in output


def test_a_column_named_type_holding_other_values_leaves_the_type_to_each_url(runner, alice, tmp_path):
    """A CRM's own Type column (Salesforce's accounts: "Customer - Direct", "Prospect") was read as the entity type:
    every row rejected, "entity_type: Must be one of: contact, company.", and no option leaves the column out (walk).
    Its contact or company values are still read, and an entity_type column stays strict."""
    path = _write_csv(tmp_path / "accounts.csv", ["Account Name", "Type", "LinkedIn Company Page"],
                      [["Acme", "Customer - Direct", "https://www.linkedin.com/company/sf-acme"],
                       ["Globex", "", "https://www.linkedin.com/company/sf-globex"],
                       ["Jane", "Contact", "jane-by-id"], ["Bare", "Prospect", "bare-id"]])
    assert "created=3 already_present=0 rejected=1" in _ok(runner, "subscriptions", "import", path,
                                                           "--account", alice.account_id)
    assert _rejected(tmp_path / "accounts.rejected.csv")[0]["reason"] == (
        "A bare id needs an entity_type column (contact or company).")
    strict = _write_csv(tmp_path / "strict.csv", ["entity_type", "url"],
                        [["Prospect", "https://www.linkedin.com/company/sf-initech"]])
    assert "created=0 already_present=0 rejected=1" in _ok(runner, "subscriptions", "import", strict,
                                                           "--account", alice.account_id)


# --- subscriptions export -------------------------------------------------------------------------

def test_export_mirrors_the_api_and_only_the_accounts_rows(runner, alice, bob):
    alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane-doe",
                                       "custom_metadata": {"crm": "7"}})
    bob.post("/subscriptions", json={"entity_type": "contact", "network_id": "bobs-person"})
    result = runner.invoke(args=["subscriptions", "export", "--account", alice.account_id])
    assert result.stdout_bytes == alice.get("/subscriptions/export").get_data()
    assert "bobs-person" not in _ok(runner, "subscriptions", "export", "--account", alice.account_id,
                                    "--format", "json", "--status", "active")
    assert runner.invoke(args=["subscriptions", "export", "--account", "acct_missing"]).exit_code != 0
