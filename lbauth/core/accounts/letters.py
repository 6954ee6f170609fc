"""What the account mail says (contract 18): a plain-text and an HTML part with the same words,
naming the site and, when the flow started from an app, the app; no secret but the one link."""

from __future__ import annotations

from html import escape

from lbauth.core.mail.outbox import Letter

_STYLE = ("font-family:system-ui,sans-serif;font-size:16px;line-height:1.5;color:#1a1a1a;max-width:560px;"
          "margin:0 auto;padding:24px")
_BUTTON = ("display:inline-block;padding:10px 18px;background:#1f4fd1;color:#ffffff;text-decoration:none;"
           "border-radius:6px;font-weight:600")


def letter(*, site: str, subject: str, paragraphs: list[str], action: str | None = None, link: str | None = None,
           after: tuple[str, ...] | list[str] = (), app_name: str | None = None) -> Letter:
    """`action` labels `link` (a button in HTML, the bare URL in text); `after` follows it."""
    intro = [f"This is about your account at {site}" + (f", for {app_name}." if app_name else ".")]
    footer = f"This message was sent by {site}. If you did not expect it, you can ignore it."
    text_parts = [*intro, *paragraphs]
    html_parts = [f"<p>{escape(p)}</p>" for p in (*intro, *paragraphs)]
    if action and link:
        text_parts.append(f"{action}:\n{link}")
        html_parts.append(f'<p><a href="{escape(link)}" style="{_BUTTON}">{escape(action)}</a></p>'
                          f'<p style="font-size:13px;color:#555">Or copy this address into your browser:<br>'
                          f"{escape(link)}</p>")
    text_parts += [*after, "--", footer]
    html_parts += [f"<p>{escape(p)}</p>" for p in after]
    html_parts.append(f'<hr><p style="font-size:13px;color:#555">{escape(footer)}</p>')
    html = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(subject)}</title></head>'
            f'<body style="{_STYLE}">{"".join(html_parts)}</body></html>')
    return Letter(subject=subject, text="\n\n".join(text_parts) + "\n", html=html, link=link)
