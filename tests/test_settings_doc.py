"""docs/settings.md is what app.Settings' descriptions give: the settings reference cannot drift from the code."""

from pathlib import Path

import app

DOC = Path(__file__).resolve().parent.parent / "docs" / "settings.md"


def test_the_settings_reference_is_current():
    assert DOC.read_text() == app.settings_reference(), "docs/settings.md is stale: run `make settings-doc`"


def test_every_setting_is_described():
    undescribed = [name for name, field in app.Settings.model_fields.items() if not field.description]
    assert undescribed == []
    assert all(f"`CHATBOT_{name.upper()}`" in DOC.read_text() for name in app.Settings.model_fields)
