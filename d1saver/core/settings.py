"""Connection settings, read from the environment with pydantic-settings (names as wrangler uses)."""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from d1saver.core.errors import ConfigError
from d1saver.core.ids import (
    DEFAULT_API_BASE_URL,
    check_api_base_url,
    validate_account_id,
    validate_database_ids,
)


class D1Settings(BaseSettings):
    """Where the database is and how to reach it. The token is a SecretStr: it never prints."""

    model_config = SettingsConfigDict(env_file=None, extra="ignore", populate_by_name=True,
                                      hide_input_in_errors=True)

    account_id: str = Field(validation_alias=AliasChoices("CLOUDFLARE_ACCOUNT_ID", "account_id"))
    api_token: SecretStr = Field(validation_alias=AliasChoices("CLOUDFLARE_API_TOKEN", "api_token"))
    database_id: str = Field(validation_alias=AliasChoices("D1_DATABASE_ID", "database_id"))
    api_base_url: str = Field(
        default=DEFAULT_API_BASE_URL,
        validation_alias=AliasChoices("D1_API_BASE_URL", "api_base_url"),
    )

    _check_account_id = field_validator("account_id")(validate_account_id)
    _check_api_base_url = field_validator("api_base_url")(check_api_base_url)

    @field_validator("database_id")
    @classmethod
    def _check_database_id(cls, value: str) -> str:
        # One id, or several separated by commas (a saver over many databases); kept as
        # given, tidied: "a, b" -> "a,b".
        return ",".join(validate_database_ids(value))

    @property
    def database_ids(self) -> list[str]:
        """The database ids of D1_DATABASE_ID, in order (one for a single database)."""
        return self.database_id.split(",")


_ENV_NAMES = {
    "account_id": "CLOUDFLARE_ACCOUNT_ID",
    "api_token": "CLOUDFLARE_API_TOKEN",
    "database_id": "D1_DATABASE_ID",
    "api_base_url": "D1_API_BASE_URL",
}


def load_settings(**overrides: str | None) -> D1Settings:
    """Read settings from the environment, with non-None overrides; a missing or invalid one
    names its variable."""
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return D1Settings(**given)
    except ValidationError as exc:
        missing, invalid = [], []
        for err in exc.errors(include_input=False, include_url=False):
            if isinstance(err.get("ctx", {}).get("error"), ConfigError):
                invalid.append(str(err["ctx"]["error"]))  # it names its variable already
                continue
            loc = str(err["loc"][0]) if err["loc"] else "?"
            name = next((env for field, env in _ENV_NAMES.items() if loc in (field, env)), loc)
            missing.append(f"{name} ({err['msg'].lower()})")
        if missing:
            invalid.insert(0, "D1 settings incomplete: set " + ", ".join(missing)
                           + " in the environment (or pass them to D1Saver(...); on the command line: "
                           "--account-id, --database-id, --api-token)")
        raise ConfigError("; ".join(invalid)) from None
