"""Credentials recognised by their format alone (rule 2 of :mod:`sarl.spec.secrets`).

Called by :mod:`sarl.spec.secrets`, which refuses a spec holding one and redacts them from
whatever is logged. Shapes follow the vendors' documented token formats as secret scanners
collect them (gitleaks' rules, as generated into Wicker25/PromptGuard ``src/core/secrets.ts``;
edoardottt/secfiles ``regex/secrets.md``; Sonar's and Kingfisher's Telegram rules). Every
pattern starts where the previous character cannot continue it and has no nested repetition,
so a scan is linear in the text (issue 38). To keep false positives low the random part after
a vendor prefix must mix character classes (:func:`classes`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

#: What a redacted value (or a URL's userinfo) is replaced with.
REDACTED: Final = "***"


def classes(text: str) -> int:
    """How many of upper case, lower case and digits ``text`` contains (a randomness proxy)."""
    return sum(any(test(c) for c in text) for test in (str.isupper, str.islower, str.isdigit))


@dataclass(frozen=True)
class _TokenRule:
    """A credential recognised by its format, whose match mixes ``min_classes`` classes."""

    kind: str
    pattern: re.Pattern[str]
    min_classes: int = 0

    def matches(self, text: str) -> bool:
        return any(self._random(m) for m in self.pattern.finditer(text))

    def redact(self, text: str) -> str:
        return self.pattern.sub(lambda m: REDACTED if self._random(m) else m[0], text)

    def _random(self, match: re.Match[str]) -> bool:
        body = match.groupdict().get("body") or match[0]
        return classes(body) >= self.min_classes


_B: Final = r"(?<![A-Za-z0-9_\-])"  # the token starts a word
# ``body`` is the random part whose character classes are counted (not the fixed prefix).
TOKEN_RULES: Final[tuple[_TokenRule, ...]] = (
    _TokenRule(
        "an AWS access key id", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])")
    ),
    _TokenRule(  # the whole block (to its END line, or to the end of the text)
        "a private key",
        re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
            r"(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|.*)",
            re.DOTALL,
        ),
    ),
    _TokenRule("a GitHub token", re.compile(_B + r"gh[pousr]_(?P<body>[A-Za-z0-9]{36,})"), 2),
    _TokenRule("a GitHub token", re.compile(_B + r"github_pat_(?P<body>\w{22,})"), 2),
    _TokenRule("a GitLab token", re.compile(_B + r"glpat-(?P<body>[A-Za-z0-9_\-]{20,})"), 2),
    _TokenRule("a Hugging Face token", re.compile(_B + r"hf_(?P<body>[A-Za-z0-9]{30,})"), 2),
    _TokenRule("an API key (sk-...)", re.compile(_B + r"sk-(?P<body>[A-Za-z0-9_\-]{20,})"), 3),
    _TokenRule("a Slack token", re.compile(_B + r"xox[abprs]-(?P<body>[A-Za-z0-9\-]{10,})"), 2),
    _TokenRule("a Google API key", re.compile(_B + r"AIza(?P<body>[A-Za-z0-9_\-]{35})"), 2),
    _TokenRule("a Stripe key", re.compile(_B + r"[sr]k_live_(?P<body>[A-Za-z0-9]{16,})"), 2),
    _TokenRule(
        "a Google OAuth client secret", re.compile(_B + r"GOCSPX-(?P<body>[A-Za-z0-9_\-]{20,})"), 2
    ),
    _TokenRule(  # the path after /services/ is the whole credential
        "a Slack webhook",
        re.compile(
            r"(?i)hooks\.slack\.com/(?:services|workflows|triggers)/(?P<body>[A-Za-z0-9_/\-]{8,})"
        ),
        2,
    ),
    _TokenRule(  # <bot id>:<35 characters>; also inside api.telegram.org/bot<token>
        "a Telegram bot token",
        re.compile(r"(?<![0-9])[0-9]{5,16}:(?P<body>[A-Za-z0-9_\-]{35})(?![A-Za-z0-9_\-])"),
        2,
    ),
    _TokenRule("an npm token", re.compile(_B + r"npm_(?P<body>[A-Za-z0-9]{36,})"), 2),
    _TokenRule("a PyPI token", re.compile(_B + r"pypi-(?P<body>[A-Za-z0-9_\-]{32,})"), 2),
    _TokenRule(
        "a SendGrid key",
        re.compile(_B + r"SG\.(?P<body>[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,})"),
        2,
    ),
    _TokenRule("a Databricks token", re.compile(_B + r"dapi(?P<body>[a-f0-9]{32})(?:-[0-9]+)?"), 2),
    _TokenRule(  # the whole file, to its Private-MAC line or to the end of the text
        "a PuTTY private key",
        re.compile(r"PuTTY-User-Key-File-[0-9]+:(?:.*?Private-(?:MAC|Hash):[^\n]*|.*)", re.DOTALL),
    ),
    _TokenRule(
        "a JSON Web Token",
        re.compile(_B + r"eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{10,}"),
    ),
    _TokenRule("a bearer token", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{16,}=*")),
    _TokenRule(  # HTTP Basic credentials: base64 of user:password ("Basic arithmetic" passes)
        "a basic-auth credential",
        re.compile(r"(?i)\bbasic\s+(?P<body>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])"),
        2,
    ),
)


#: Latin look-alikes (Cyrillic and Greek letters drawn like Latin ones): a key spelled
#: ``раssword`` with Cyrillic ``р`` and ``а`` reads as ``password`` to whoever set it.
_HOMOGLYPHS: Final = str.maketrans(
    "аbвсԁеɡһіјкӏмпорԛѕтуԝхАВЕКМНОРСТХЅІЈҮαβεικνορτυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧ",
    "abbcdeghijklmnopqstywxABEKMHOPCTXSIJYabeikvoptuxABEZHIKMNOPTYX",
)
#: "Password" (and "secret") in the languages a key may be written in, found in the key
#: case-folded with everything but letters and digits removed (``mot_de_passe``,
#: ``Contraseña``, ``пароль``).
FOREIGN_WORDS: Final = re.compile(
    "motdepasse|contraseña|contrasena|passwort|kennwort|senha|wachtwoord|hasło|haslo|heslo|"
    "lösenord|losenord|adgangskode|passord|salasana|jelszó|jelszo|parola|şifre|пароль|"
    "гасло|секрет|密码|密碼|口令|パスワード|비밀번호|كلمةالمرور|סיסמה|पासवर्ड|รหัสผ่าน|"
    "mậtkhẩu|katasandi|geheim"
)


def fold_key(key: str) -> tuple[str, str]:
    """``key`` as the name rules read it: (Latin form, for the English rules; letters and
    digits alone, case-folded, for :data:`FOREIGN_WORDS`). Percent-escapes are decoded
    (``api%5Fkey``), compatibility forms unified (full-width letters) and look-alike letters
    mapped to Latin."""
    import unicodedata
    from urllib.parse import unquote

    text = unicodedata.normalize("NFKC", unquote(key))
    bare = "".join(c for c in text.casefold() if c.isalnum())
    return text.translate(_HOMOGLYPHS), bare
