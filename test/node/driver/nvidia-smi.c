// nvidia-smi.c stands in for NVIDIA's nvidia-smi on the real node (make
// test-node): a program linked against the GNU C library, as nvidia-smi
// is, that prints recorded output. hack/build-node.sh builds it with the
// transcript test/node/testdata/nvidia-smi.txt embedded (TRANSCRIPT), in
// the format of the plugin's --nvidia-smi-output: a line
// "$ nvidia-smi <arguments>" before each command's output. Run with
// arguments the transcript has, it prints their output and exits 0;
// otherwise it says so on stderr and exits 2.
#include <stdio.h>
#include <string.h>

// The transcript, NUL-terminated, as the assembler includes it.
__asm__(".section .rodata\n"
	".global transcript\n"
	"transcript:\n"
	".incbin \"" TRANSCRIPT "\"\n"
	".byte 0\n"
	".previous\n");
extern const char transcript[];

int main(int argc, char **argv) {
	char command[4096] = "$ nvidia-smi";
	for (int i = 1; i < argc; i++) {
		if (strlen(command) + strlen(argv[i]) + 2 > sizeof(command)) {
			fprintf(stderr, "nvidia-smi stand-in: arguments too long\n");
			return 2;
		}
		strcat(command, " ");
		strcat(command, argv[i]);
	}
	size_t n = strlen(command);
	// Find the command's line, then print up to the next "$ " line.
	for (const char *line = transcript; *line != '\0';) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		const char *next = end ? end + 1 : line + len;
		if (len == n && strncmp(line, command, n) == 0) {
			for (const char *out = next; *out != '\0' && strncmp(out, "$ ", 2) != 0;) {
				const char *e = strchr(out, '\n');
				size_t l = e ? (size_t)(e - out) + 1 : strlen(out);
				fwrite(out, 1, l, stdout);
				out += l;
			}
			return 0;
		}
		line = next;
	}
	fprintf(stderr, "nvidia-smi stand-in: no recorded output for `%s`\n", command + 2);
	return 2;
}
