"""Stand-in provider APIs for tests: loopback servers that speak the Anthropic Messages,
OpenAI Responses and Gemini wire formats, answer from a script of tool calls and record
every request (headers, the key that arrived, the body). See `script` for how a stand-in
picks its answer and `server` for serving one over HTTPS behind the gateway."""

from tests.standin.anthropic import AnthropicStandIn
from tests.standin.gemini import GeminiStandIn
from tests.standin.openai_responses import OpenAIResponsesStandIn
from tests.standin.script import Edit, Fail, Say, Script, Shell, Usage, two_turns
from tests.standin.server import Seen, StandIn

__all__ = ["AnthropicStandIn", "Edit", "Fail", "GeminiStandIn", "OpenAIResponsesStandIn", "Say",
           "Script", "Seen", "Shell", "StandIn", "Usage", "two_turns"]
