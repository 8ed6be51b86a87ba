"""Custom::RandomSecret: a generated password or token, returned with NoEcho.

    DbPassword:
      Type: Custom::RandomSecret
      Properties:
        ServiceToken: !Ref ProviderTopicArn
        Length: 32                                   # 1..1024, default 32
        Alphabet: "abcdefghijkmnpqrstuvwxyz23456789" # default: A-Z a-z 0-9
        Rotation: "2026-01"                          # optional: change it to get a new secret
        ParameterName: /myapp/db/password            # optional: also kept in SSM as a SecureString
        KmsKeyId: alias/myapp                        # optional: the key for that SecureString
    # !GetAtt DbPassword.Secret   (and .ParameterName when stored)

The same secret comes back on every Update that does not change Length, Alphabet or Rotation;
changing one of those replaces the resource with a new secret (CloudFormation then deletes the
old one). ParameterName and KmsKeyId can change in place: the same secret moves.

Why it needs a server key or SSM. CloudFormation sends no Data back on Update, and the provider
keeps no state, so "the same secret on Update" has to come from somewhere. Two sound sources:

- A server key (CFN_PROVIDER_SECRET_KEY_FILE: a file of at least 32 random bytes, the same on
  every provider machine, e.g. `head -c 32 /dev/urandom`). Create picks a random 64-bit nonce
  (`secrets`) for the PhysicalResourceId and the secret is HMAC-SHA256(key, id, length,
  alphabet), mapped onto the alphabet without bias. The id never reveals the secret without the
  key, and a replacement gets a new id, so a new secret. The id also names the key (a short hash
  of it): an Update under a different key fails loudly rather than silently changing the secret.
- Without a key, ParameterName is required: the secret is drawn with `secrets` and SSM is the
  place it is kept; an Update reads it back.

With neither, Create fails saying so. Time is never an input.

SSM: the parameter's Description marks which resource owns it (PhysicalResourceId, logical id,
StackId). Create and Update refuse to write a parameter another resource owns; a secret is read
back only from a parameter whose marker names this very resource (its PhysicalResourceId in this
stack and logical id); Delete removes the parameter only while it is still this resource's (a
replacement that reused the name owns it now), and tolerates it being gone.

Hostile templates. Properties, OldResourceProperties (a rollback swaps them: an Update that
failed to claim `/prod/db/password` is rolled back with that name in OldResourceProperties) and
even the PhysicalResourceId (a stack can move a resource to this ServiceToken from another
provider that answered any id) are the template author's to choose. So nothing here trusts a
name or an id alone: SSM parameters go by their owner marker, and a key-derived id carries a
binding (an HMAC of the server key over StackId and logical id) that another stack cannot
produce, so naming another resource's id derives nothing.

Principals (cfn_provider.trust.tenants). A request's principal is part of what derives its secret:
the binding and the derivation label carry it, and so does the SSM owner marker, for every
principal but the default one (whose values are those of every earlier release, unchanged). A
tenant who names another tenant's StackId, logical id and PhysicalResourceId (on a path that got
that far) derives nothing of the other's: the binding does not match, and no derivation of theirs
is the other's secret.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import string
from typing import Any

from cfn_provider import Call, Resource
from cfn_provider.errors import HandlerFailure
from cfn_provider.trust.tenants import DEFAULT as DEFAULT_PRINCIPAL

KEY_ENV = "CFN_PROVIDER_SECRET_KEY_FILE"
DEFAULT_ALPHABET = string.ascii_uppercase + string.ascii_lowercase + string.digits
MIN_KEY_BYTES = 32
_ID = re.compile(r"-(?P<nonce>[0-9a-f]{16})(?:-k(?P<key>[0-9a-f]{8})(?:-b(?P<bind>[0-9a-f]{8}))?)?$")
_OWNER = re.compile(
    r"^cfn-provider Custom::RandomSecret (?P<id>\S+) logical=(?P<logical>\S+) stack=(?P<stack>\S+)"
    r"(?: principal=(?P<principal>\S+))?$"
)


class SecretError(HandlerFailure, RuntimeError):
    reason_is_message = True  # the Reason is the message alone (cfn_provider.pipeline.raised)


def load_key() -> bytes | None:
    path = os.environ.get(KEY_ENV)
    if not path:
        return None
    try:
        with open(path, "rb") as fh:
            key = fh.read()
    except OSError as exc:
        raise SecretError(f"cannot read the server key {path} ({KEY_ENV}): {exc.strerror}") from None
    if len(key) < MIN_KEY_BYTES:  # the raw bytes, as used: a binary key may begin or end with a space byte
        raise SecretError(f"the server key {path} ({KEY_ENV}) is shorter than {MIN_KEY_BYTES} bytes")
    return key


def key_id(key: bytes) -> str:
    return hashlib.sha256(b"cfn-provider key id\0" + key).hexdigest()[:8]


def tenant_part(call: Call) -> str:
    """What a derivation adds for the request's principal: nothing for the default one (its values
    stay those of every earlier release), the principal's name for any other."""
    return "" if call.principal == DEFAULT_PRINCIPAL else f"\0principal={call.principal}"


def binding(key: bytes, call: Call) -> str:
    """Ties a key-derived id to the resource (and principal) that made it: only the server key makes it."""
    label = f"cfn-provider/random-secret/binding/v1\0{call.stack_id}\0{call.logical_id}{tenant_part(call)}".encode()
    return hmac.new(key, label, hashlib.sha256).hexdigest()[:8]


def stem_of(call: Call) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", f"{call.stack_name}-{call.logical_id}")[:200]


def derive(key: bytes, physical_id: str, length: int, alphabet: str, tenant: str = "") -> str:
    """Deterministic and unbiased: an HMAC-SHA256 stream, rejection-sampled onto the alphabet
    (`tenant`: `tenant_part` of the request)."""
    n = len(alphabet)
    bound = 256 - 256 % n  # bytes at or above this would favour the first characters
    label = f"cfn-provider/random-secret/v1\0{physical_id}\0{length}\0{alphabet}{tenant}".encode()
    out: list[str] = []
    counter = 0
    while len(out) < length:
        block = hmac.new(key, label + counter.to_bytes(8, "big"), hashlib.sha256).digest()
        counter += 1
        out.extend(alphabet[b % n] for b in block if b < bound)
    return "".join(out[:length])


def generate(length: int, alphabet: str) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(length))


def alphabet_of(props: dict[str, Any]) -> str:
    chars = "".join(dict.fromkeys(props.get("Alphabet") or DEFAULT_ALPHABET))  # distinct, in order
    if len(chars) < 2:
        raise SecretError("Alphabet needs at least two distinct characters")
    return chars


def owner_marker(physical_id: str, call: Call) -> str:
    marker = f"cfn-provider Custom::RandomSecret {physical_id} logical={call.logical_id} stack={call.stack_id}"
    return marker if call.principal == DEFAULT_PRINCIPAL else f"{marker} principal={call.principal}"


class RandomSecret(Resource):
    schema = {
        "type": "object",
        "properties": {
            "Length": {"type": "integer", "minimum": 1, "maximum": 1024, "default": 32},
            "Alphabet": {"type": "string", "minLength": 2, "maxLength": 1024},
            "Rotation": {"type": "string", "maxLength": 256},
            "ParameterName": {"type": "string", "minLength": 1, "maxLength": 2048, "pattern": r"^[A-Za-z0-9_.\-/]+$"},
            "KmsKeyId": {"type": "string", "minLength": 1, "maxLength": 2048},
        },
        "additionalProperties": False,
    }
    replace_on = ("Length", "Alphabet", "Rotation")

    # --- create
    async def create(self, props: dict[str, Any], call: Call) -> dict[str, Any]:
        length, alphabet = props["Length"], alphabet_of(props)
        key = load_key()
        name = props.get("ParameterName")
        stem = stem_of(call)
        nonce = secrets.token_hex(8)
        if key is not None:
            physical_id = f"{stem}-{nonce}-k{key_id(key)}-b{binding(key, call)}"
            secret = derive(key, physical_id, length, alphabet, tenant_part(call))
        elif name:
            physical_id = f"{stem}-{nonce}"
            secret = generate(length, alphabet)
        else:
            raise SecretError(
                "Custom::RandomSecret needs somewhere to keep the secret so Updates return the same one "
                f"(CloudFormation sends no Data back): give it a ParameterName (SSM), or configure a "
                f"server key on the provider ({KEY_ENV})"
            )
        if name:
            async with call.client("ssm") as ssm:
                await self._claim(ssm, name, physical_id, call)
                await self._put(ssm, name, secret, physical_id, props.get("KmsKeyId"), call)
        return self._answer(physical_id, secret, name)

    # --- update (Length, Alphabet and Rotation are unchanged: the SDK replaces otherwise)
    async def update(self, props: dict[str, Any], old: dict[str, Any], call: Call) -> dict[str, Any]:
        physical_id = call.physical_id or ""
        name, old_name = props.get("ParameterName"), old.get("ParameterName")
        async with call.client("ssm") as ssm:
            secret = await self._recover(ssm, physical_id, props, old_name, call)
            if name:
                await self._claim(ssm, name, physical_id, call)  # every time: a rollback may name anything
                if (
                    name != old_name
                    or props.get("KmsKeyId") != old.get("KmsKeyId")
                    or await self._stored(ssm, name) != secret
                ):
                    await self._put(ssm, name, secret, physical_id, props.get("KmsKeyId"), call)
            if old_name and old_name != name:
                await self._remove(ssm, old_name, physical_id, call)
        return self._answer(physical_id, secret, name)

    async def _recover(
        self, ssm: Any, physical_id: str, props: dict[str, Any], old_name: str | None, call: Call
    ) -> str:
        """The secret of *this* resource, or an error: never another resource's."""
        match = _ID.search(physical_id)
        if not match or not physical_id.startswith(stem_of(call) + "-"):
            raise SecretError(
                "the PhysicalResourceId is not one this handler made for this stack and logical id; "
                "change Rotation to replace the secret"
            )
        if match["key"]:
            key = load_key()
            if key is None:
                raise SecretError(
                    f"this secret was derived from a server key and none is configured ({KEY_ENV}); "
                    "restore the key, or change Rotation to replace the secret"
                )
            if key_id(key) != match["key"]:
                raise SecretError(
                    f"the server key changed since this secret was made (key {match['key']}, "
                    f"now {key_id(key)}); restore it, or change Rotation to replace the secret"
                )
            if match["bind"] and not hmac.compare_digest(match["bind"], binding(key, call)):
                raise SecretError(
                    "the PhysicalResourceId was not made for this stack and logical id; "
                    "change Rotation to replace the secret"
                )
            return derive(key, physical_id, props["Length"], alphabet_of(props), tenant_part(call))
        if not props.get("ParameterName"):
            raise SecretError(
                "without a server key this secret is kept only in SSM, so ParameterName cannot be "
                "removed; change Rotation to replace the secret instead"
            )
        # The old name first (where the secret was), then the new one (a rollback after the move got
        # that far); each only when its owner marker says this very resource put it there.
        for candidate in dict.fromkeys(n for n in (old_name, props.get("ParameterName")) if n):
            if self._owns(await self._owner(ssm, candidate), physical_id, call):
                secret = await self._stored(ssm, candidate)
                if secret is not None:
                    return secret
        raise SecretError(
            "the secret is not in an SSM parameter this resource owns (ParameterName, old or new); "
            "change Rotation to make a new one"
        )

    # --- delete
    async def delete(self, props: dict[str, Any], call: Call) -> None:
        name = props.get("ParameterName")
        if name and call.physical_id:
            async with call.client("ssm") as ssm:
                await self._remove(ssm, str(name), call.physical_id, call)

    # --- SSM
    @staticmethod
    def _answer(physical_id: str, secret: str, name: str | None) -> dict[str, Any]:
        data = {"Secret": secret}
        if name:
            data["ParameterName"] = name
        return {"PhysicalResourceId": physical_id, "Data": data, "NoEcho": True}

    @staticmethod
    async def _owner(ssm: Any, name: str) -> dict[str, str] | None:
        """None: no such parameter; {}: one not made by this handler; else its owner's ids."""
        found = await ssm.describe_parameters(ParameterFilters=[{"Key": "Name", "Option": "Equals", "Values": [name]}])
        for param in found.get("Parameters", []):
            if param.get("Name") == name:
                match = _OWNER.match(param.get("Description") or "")
                return match.groupdict() if match else {}
        return None

    @staticmethod
    def _owns(owner: dict[str, str] | None, physical_id: str, call: Call) -> bool:
        """The marker names this very resource: its id, in this stack, under this logical id."""
        if not owner:
            return False
        return (
            owner.get("id") == physical_id
            and owner.get("stack") == call.stack_id
            and owner.get("logical") == call.logical_id
            and (owner.get("principal") or DEFAULT_PRINCIPAL) == call.principal
        )

    async def _claim(self, ssm: Any, name: str, physical_id: str, call: Call) -> None:
        """A parameter may be (over)written only when absent or already this logical resource's."""
        owner = await self._owner(ssm, name)
        if owner is None:
            return
        mine = (owner.get("principal") or DEFAULT_PRINCIPAL) == call.principal
        if mine and owner.get("stack") == call.stack_id and owner.get("logical") == call.logical_id:
            return  # this resource's, the one it replaces, or an earlier attempt at it
        raise SecretError(
            "the SSM parameter named by ParameterName already exists and is not this resource's; "
            "choose another ParameterName"
        )

    @staticmethod
    async def _put(ssm: Any, name: str, secret: str, physical_id: str, kms_key: str | None, call: Call) -> None:
        args: dict[str, Any] = dict(
            Name=name, Value=secret, Type="SecureString", Overwrite=True, Description=owner_marker(physical_id, call)
        )
        if kms_key:
            args["KeyId"] = kms_key
        await ssm.put_parameter(**args)
        call.log.info("random_secret.stored", parameter=name)

    @staticmethod
    async def _stored(ssm: Any, name: str) -> str | None:
        try:
            found = await ssm.get_parameter(Name=name, WithDecryption=True)
        except ssm.exceptions.ParameterNotFound:
            return None
        value: str = found["Parameter"]["Value"]
        return value

    async def _remove(self, ssm: Any, name: str, physical_id: str, call: Call) -> None:
        owner = await self._owner(ssm, name)
        if owner is None:
            return  # already gone
        if not self._owns(owner, physical_id, call):
            call.log.info(
                "random_secret.parameter_kept",
                parameter=name,
                detail="the parameter is not this resource's (a replacement's, or another stack's)",
            )
            return
        try:
            await ssm.delete_parameter(Name=name)
        except ssm.exceptions.ParameterNotFound:
            pass
        call.log.info("random_secret.parameter_deleted", parameter=name)


handler = RandomSecret.handler()
create, update, delete = handler.create, handler.update, handler.delete
