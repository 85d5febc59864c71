/**
 * Text reports (`show`, the sweep's text, the operator commands) print values
 * that came from a network config, CNI_ARGS, Kubernetes or Milo: a NAD's
 * author chooses its `name` (253 characters), a pod's namespace user its
 * name. A carriage return, a line feed or an escape sequence in one could
 * erase the line before it on a terminal and print a fake holder in its
 * place; a bidirectional override could show one name as another. So every
 * line of a text report is made printable before it is written: each
 * character of Unicode's control (Cc), format (Cf: the bidirectional
 * controls, zero-width characters), surrogate (Cs), line and paragraph
 * separator (Zl, Zp) categories is written as its `\u001b` escape.
 */

/** The characters a report never writes as they are. */
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}]/gu;

/** `text` with every unprintable character as its `\uXXXX` escape. */
export function printable(text: string): string {
  return text.replace(UNPRINTABLE, (ch) => {
    const cp = ch.codePointAt(0)!;
    return cp > 0xffff ? `\\u{${cp.toString(16)}}` : `\\u${cp.toString(16).padStart(4, "0")}`;
  });
}

/** Whether `text` has a character {@link printable} escapes. */
export function hasUnprintable(text: string): boolean {
  UNPRINTABLE.lastIndex = 0;
  return UNPRINTABLE.test(text);
}

/** Report lines as one text: each line made {@link printable}, then joined, ending in a newline. */
export function printableLines(lines: string[]): string {
  return lines.map(printable).join("\n") + "\n";
}
