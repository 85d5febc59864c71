/**
 * Kubernetes name and label rules (apimachinery's `IsDNS1123Subdomain`,
 * `IsQualifiedName`, `IsValidLabelValue`), with its messages. One copy for
 * request validation, seed names and label selectors.
 */

const LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const SUBDOMAIN = new RegExp(`^${LABEL}(\\.${LABEL})*$`);
const NAME_PART = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const LABEL_VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$/;

const SUBDOMAIN_MESSAGE =
  "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'";

/** Why `name` is not a DNS-1123 subdomain of at most 253 characters; undefined when it is. */
export function subdomainError(name: string): string | undefined {
  if (name.length > 253) return "must be no more than 253 characters";
  return SUBDOMAIN.test(name) ? undefined : SUBDOMAIN_MESSAGE;
}

/** Why `key` is not a qualified name (`[prefix/]name`, as label keys are); undefined when it is. */
export function qualifiedNameError(key: string): string | undefined {
  const slash = key.lastIndexOf("/");
  const prefix = slash >= 0 ? key.slice(0, slash) : undefined;
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  if (prefix !== undefined && subdomainError(prefix) !== undefined) {
    return `prefix part ${SUBDOMAIN_MESSAGE}`;
  }
  if (name.length === 0 || name.length > 63) return "name part must be no more than 63 characters";
  if (!NAME_PART.test(name)) {
    return "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
  }
  return undefined;
}

/** Why `value` is not a label value; undefined when it is. */
export function labelValueError(value: string): string | undefined {
  if (value.length > 63) return "must be no more than 63 characters";
  if (!LABEL_VALUE.test(value)) {
    return "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
  }
  return undefined;
}

const DNS1123_LABEL = new RegExp(`^${LABEL}$`);

/** Why `name` is not a DNS-1123 label (namespace names); undefined when it is. */
export function labelError(name: string): string | undefined {
  if (name.length > 63) return "must be no more than 63 characters";
  return DNS1123_LABEL.test(name)
    ? undefined
    : "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'";
}
