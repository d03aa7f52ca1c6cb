"""Typed protocol errors: each has a stable code and the WebSocket close code it maps to."""

from __future__ import annotations

# RFC 6455 close codes used at the server boundary.
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_UNSUPPORTED_DATA = 1003
CLOSE_INVALID_PAYLOAD = 1007
CLOSE_POLICY_VIOLATION = 1008
CLOSE_MESSAGE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011
CLOSE_TRY_AGAIN_LATER = 1013


class ProtocolError(Exception):
    """Bad input from a client: becomes an `error` event and a close code at the boundary."""

    code = "protocol_error"
    close_code = CLOSE_PROTOCOL_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class MalformedMessageError(ProtocolError):
    """A text message that is not a JSON object."""

    code = "malformed_json"
    close_code = CLOSE_INVALID_PAYLOAD


class UnknownMessageTypeError(ProtocolError):
    """A JSON message whose `type` the protocol does not define."""

    code = "unknown_type"
    close_code = CLOSE_PROTOCOL_ERROR


class InvalidFieldError(ProtocolError):
    """A known message with a missing, unknown, mistyped or out-of-range field."""

    code = "invalid_field"
    close_code = CLOSE_POLICY_VIOLATION


class InvalidAudioError(ProtocolError):
    """Audio bytes that cannot be decoded: NaN/Inf samples, a frame that is too large, …"""

    code = "invalid_audio"
    close_code = CLOSE_INVALID_PAYLOAD


class StateError(ProtocolError):
    """A message that is valid on its own but not now: a second start, audio after stop."""

    code = "unexpected_message"
    close_code = CLOSE_PROTOCOL_ERROR


class UnsupportedHotwordError(InvalidFieldError):
    """Hotwords the model cannot write (characters outside its vocabulary), refused when
    the stream starts."""

    code = "unsupported_hotword"


class EmptyCommitError(StateError):
    """A commit with no uncommitted audio."""

    code = "commit_empty"


class AudioOverwrittenError(Exception):
    """A ring-buffer read reached audio that has already been overwritten (a bug or lag)."""

    code = "audio_overwritten"


class FrameTooLargeError(ProtocolError):
    """A binary or text frame over the configured size."""

    code = "frame_too_large"
    close_code = CLOSE_MESSAGE_TOO_BIG


class SessionLimitError(ProtocolError):
    """The session ran past its maximum duration, or sent nothing for too long."""

    code = "session_limit"
    close_code = CLOSE_POLICY_VIOLATION


class ServerFullError(ProtocolError):
    """Too many sessions, on the server or from one address: try again later."""

    code = "server_full"
    close_code = CLOSE_TRY_AGAIN_LATER


class UnauthorizedError(ProtocolError):
    """A missing or wrong API key presented inside the protocol (Twilio's customParameters)."""

    code = "unauthorized"
    close_code = CLOSE_POLICY_VIOLATION


class StreamIdTakenError(ProtocolError):
    """A client named its stream with the id of another live stream."""

    code = "stream_id_taken"
    close_code = CLOSE_POLICY_VIOLATION


class WebhookRefusedError(ProtocolError):
    """A client named a webhook URL the server does not allow (or has no webhooks)."""

    code = "webhook_not_allowed"
    close_code = CLOSE_POLICY_VIOLATION


class ResumeRefusedError(ProtocolError):
    """A resume the server cannot honour: resuming is off, the token is forged, expired or
    another tenant's, the stream is no longer waiting, or the resent audio would leave a
    gap. The stream it names is unharmed."""

    code = "resume_refused"
    close_code = CLOSE_POLICY_VIOLATION
