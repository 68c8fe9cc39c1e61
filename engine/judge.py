"""`c.judge`: one verdict from an OpenAI-compatible chat completions endpoint.

The reply's message content must be `{"score": 0..1, "reasoning": "…"}`; a reply
that is not is retried, then the verdict is an error (the trial fails with kind
`judge`) whose `error` names the cause: "judge unreachable: connection refused at
127.0.0.1:9", an HTTP status, or replies with no score. The evidence keeps the
prompt, every raw response, the provider's metadata and the parsed judgment.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx

from . import keys, limits
from .config import JudgeConfig
from .models import Validation
from .redact import Redactor

SYSTEM = (
    "You are a strict reviewer grading the work of an AI coding agent. "
    "Answer with one JSON object only: {\"score\": <number from 0 to 1>, \"reasoning\": \"<why>\"}."
)


def build_prompt(criterion: str, state: dict[str, Any]) -> str:
    parts = [f"Criterion: {criterion}"]
    for key, title in (("task", "Task given to the agent"), ("final_message", "Agent's final message"),
                       ("files_changed", "Files changed"), ("diff", "Diff of the workspace")):
        value = state.get(key)
        if value:
            text = "\n".join(value) if isinstance(value, list) else str(value)
            parts.append(f"## {title}\n{text}")
    for key, value in state.items():
        if key not in ("task", "final_message", "files_changed", "diff"):
            parts.append(f"## {key}\n{value}")
    parts.append("Grade how well the work meets the criterion.")
    return "\n\n".join(parts)


def parse_judgment(content: str) -> dict[str, Any] | None:
    text = content.strip()
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.DOTALL)
    candidates = [fenced.group(1)] if fenced else []
    brace = re.search(r"\{.*\}", text, re.DOTALL)
    candidates += [text] + ([brace.group(0)] if brace else [])
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        score = data.get("score") if isinstance(data, dict) else None
        if isinstance(score, (int, float)) and not isinstance(score, bool) and 0 <= score <= 1:
            return {"score": float(score), "reasoning": str(data.get("reasoning", ""))}
    return None


def _no_answer(error: httpx.HTTPError, address: str, timeout: float) -> str:
    """Why a request got no answer, as a reason says it: "judge unreachable: connection
    refused at 127.0.0.1:9"."""
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, httpx.ConnectTimeout):
        return f"judge unreachable: connection timed out at {address}"
    if isinstance(error, httpx.TimeoutException):
        return f"judge did not answer within {timeout:g}s at {address}"
    if isinstance(error, httpx.ConnectError):
        lowered = text.lower()
        if "refused" in lowered:
            text = "connection refused"
        elif any(w in lowered for w in ("name or service", "nodename", "name resolution", "getaddrinfo")):
            text = "its host name does not resolve"
        return f"judge unreachable: {limits.quote(text, 160)} at {address}"
    return f"judge request failed at {address}: {type(error).__name__}: {limits.quote(text, 160)}"


def _address(url: str) -> str:
    parsed = httpx.URL(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host  # an IPv6 address
    return f"{host}:{port}"


def ask_judge(config: JudgeConfig | None, criterion: str, threshold: float,
              state: dict[str, Any], budget_s: float | None = None,
              redactor: Redactor | None = None) -> Validation:
    """`budget_s`: what is left of the trial's timeout; retries never run past it.

    The judge reads the redacted conversation: the prompt passes `redactor` (the trial's; the
    static patterns alone without one) before it is sent."""
    validation = Validation(kind="judge", name=criterion, status="error",
                            evidence={"criterion": criterion, "threshold": threshold})
    evidence = validation.evidence
    if config is None:
        evidence["error"] = "no [judge] section in proctor.toml: add base_url and model"
        return validation
    key = (keys.get(config.api_key_env) or "") if config.api_key_env else ""
    if config.api_key_env and not key:
        evidence["error"] = (f"the judge's key variable {config.api_key_env} is not set "
                             "(nor saved in the system keyring)")
        return validation
    # limits.redact: a final message cut while reading must not hand the judge half a key.
    prompt = limits.redact(redactor or Redactor(), build_prompt(criterion, state))
    request = {"model": config.model, "temperature": 0,
               "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]}
    evidence.update(prompt=prompt, model=config.model, responses=[])
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = config.base_url.rstrip("/") + "/chat/completions"
    timeout = min(config.timeout, budget_s or config.timeout)
    cause: str | None = None  # why the last attempt got no answer, as the reason says it
    problem = ""  # what was wrong with the last answer
    started = time.monotonic()
    ends = started + (budget_s if budget_s is not None else float("inf"))
    with httpx.Client(timeout=timeout) as client:
        for attempt in range(config.retries + 1):
            if attempt:
                pause = min(0.5 * 2 ** (attempt - 1), 8)
                if time.monotonic() + pause >= ends:
                    break
                time.sleep(pause)
            try:
                response = client.post(url, json=request, headers=headers)
            except httpx.HTTPError as e:
                evidence["responses"].append({"error": f"{type(e).__name__}: {e}"})
                cause = _no_answer(e, _address(url), timeout)
                continue
            entry: dict[str, Any] = {"status": response.status_code, "raw": response.text}
            evidence["responses"].append(entry)
            if response.status_code >= 400:
                said = limits.quote(" ".join(response.text.split()), 160)
                cause = f"judge answered HTTP {response.status_code} at {_address(url)}" + (
                    f": {said}" if said else "")
                if response.status_code == 429 or response.status_code >= 500:
                    continue
                break  # a 4xx other than 429 will not get better by asking again
            try:
                body = response.json()
                content = body["choices"][0]["message"]["content"] or ""
            except (ValueError, KeyError, IndexError, TypeError):
                cause, problem = None, "its reply is not a chat completion"
                continue
            evidence["metadata"] = {k: body.get(k) for k in ("id", "model", "usage", "system_fingerprint")
                                    if body.get(k) is not None}
            judgment = parse_judgment(content)
            if judgment is None:
                entry["problem"] = "reply is not a JSON object with a score from 0 to 1"
                cause, problem = None, entry["problem"]
                continue
            evidence["judgment"] = judgment
            validation.status = "passed" if judgment["score"] >= threshold else "failed"
            break
    validation.ms = int((time.monotonic() - started) * 1000)
    if validation.status == "error" and "error" not in evidence:
        evidence["error"] = cause or (f"judge gave no usable verdict after {len(evidence['responses'])} "
                                      f"attempts" + (f": {problem}" if problem else ""))
    return validation
